"""Analyses the app, report and benches read: success correlation, accuracy ceiling."""
