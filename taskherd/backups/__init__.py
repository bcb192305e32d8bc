"""Backups of the queue's database to a folder or an S3-compatible bucket, and restores."""
