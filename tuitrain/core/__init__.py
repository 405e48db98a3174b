"""The base: config (the typed preset schema), errors, safe files, text, the run's
control object and its run dir. No torch, no Textual."""
