"""The scripted OpenAI-compatible server: it lives in the package (`lis_tui.servers.scripted`, which
`lis-tui fake-server` serves to people trying lis-tui without a model); tests import it from here."""

from lis_tui.servers.scripted import (  # noqa: F401
                                      Call, Delay, Error, FakeOpenAI, Hangup, Reply, Request, call, delay, error, fake_logprob,
                                      hangup, render_message, reply, submit, token_ids,
                                      )
