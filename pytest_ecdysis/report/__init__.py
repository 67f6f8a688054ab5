"""What people read: terminal and Markdown summaries, the HTML page, the PR body, the verdict, progress lines."""
