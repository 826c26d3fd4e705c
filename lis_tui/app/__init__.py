"""The Textual app (`lis-tui`, `lis-tui tui`) and the terminal relay of `exec` and `shell`.

tui (`create_app`, the app and its bindings; app.tcss its styles), screens/ (one module per
screen), widgets/ (the transcript, the model's text, dialogs), rootfs_offer (the rootfs the setup
screen offers to build). ptyrelay, ptyfilter and ptymodes relay the user's terminal to a
sandboxed program on a pty of ours and give the terminal back as they found it; they import no
textual, and `lis-tui exec`/`shell` use them without the app.

The only package that imports textual. May import: isolation, tools, lis_tui.agent, .model,
.config, .runs, .conversation, and (for a shell and the status of a live run) lis_tui.commands.
"""
