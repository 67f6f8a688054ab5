"""Failure records, pattern groups and what diagnosis may see of them."""
