"""Streamlit app."""
