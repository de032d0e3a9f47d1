"""Request objects, task configuration and the task engine."""
