"""What the bench shows: the progress line while it runs (`progress`), the tables and JSON
(`report`), the verdicts (`verdict`) and the plots (`plot`, needs matplotlib)."""
