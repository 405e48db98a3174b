"""The run dir as one thing: its layout (every file and folder named once, `RunDir`), its
lock, the control dir's life, the rank pointer and reports, the manifest of a script's runs,
and the one reader, follower, state rule, summary and ending that every command and screen
uses. No torch, no Textual."""
