"""The live class: rooms in the shared state, the session's place in one, the join card, following the teacher."""
