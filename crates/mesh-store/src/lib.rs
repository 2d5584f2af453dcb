//! mesh-store: the mesh's records on SQLite (embedded default) or PostgreSQL.
