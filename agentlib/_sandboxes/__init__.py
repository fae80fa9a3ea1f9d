"""A session's computer: the sandbox kinds, their workspaces, and the model's tools there."""
