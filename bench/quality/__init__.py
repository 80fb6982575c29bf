"""Hit quality on labelled pairs: thresholds and policies, the slot guard, embedders, tuning;
and the script that builds the QQP pair files they read."""
