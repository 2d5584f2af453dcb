//! mesh-builder: the build machine's logic (takes `build` work from the
//! `mesh-build-machine` seat, publishes `built`). Grows with the builds issue.
