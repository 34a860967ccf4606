"""What plugins implement and receive, and how they are loaded, checked and blamed."""
