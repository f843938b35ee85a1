"""The experiment store: chunked Parquet tables, the run lock, the manifest, config guard and maintenance."""
