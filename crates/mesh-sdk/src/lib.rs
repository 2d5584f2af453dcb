//! mesh-sdk: what a module links to (emit, consume, serve and call tools, take
//! seat work). Grows with the SDK issue.
