"""Replica scans: which registered files each mirror really holds, and their sizes."""
