//! mesh-host: the host agent's logic (enrol once, bind its own consumer, apply
//! declarations, report, heartbeat). Grows with the host issue.
