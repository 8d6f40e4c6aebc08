"""The use cases: one function per thing a user, an admin or a process does, over the ports they need."""
