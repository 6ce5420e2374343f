"""A page of the app as parts: layout, slides, questions, figures and their export, widgets bound to the URL, text."""
