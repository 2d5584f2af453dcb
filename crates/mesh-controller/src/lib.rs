//! mesh-controller: the controller daemon's logic (single writer of records and of
//! JetStream definitions). Grows with the controller issue.
