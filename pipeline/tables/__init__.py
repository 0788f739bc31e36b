"""Input tables (CSV, Parquet; files, folders, globs, fsspec URLs) read as Arrow by parts."""
