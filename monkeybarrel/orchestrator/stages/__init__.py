"""Stage drivers: sample, verify, label, select and evaluate one experiment against its store."""
