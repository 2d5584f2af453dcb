//! mesh-bus: the NATS side of mesh (connect with a pinned certificate, assert
//! JetStream objects, publish, consume). The seam a second bus would sit behind.
