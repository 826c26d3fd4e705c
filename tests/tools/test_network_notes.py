"""tools.network_notes: which tools' words show that the network is off, and each host said once."""

import pytest

from isolation.net import AllowWords
from tools.network_notes import NetworkNotes


@pytest.mark.parametrize("output, host", [
    ("curl: (6) Could not resolve host: pypi.org", "pypi.org"),
    ("fatal: unable to access 'https://github.com/a/b/': Could not resolve host: github.com", "github.com"),
    ("wget: unable to resolve host address ‘example.org’", "example.org"),
    ("Err:1 http://archive.ubuntu.com/ubuntu noble InRelease\n  Temporary failure resolving 'archive.ubuntu.com'",
     "archive.ubuntu.com"),
    ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.x.io', port=443): Max retries exceeded "
     "(Caused by NameResolutionError(\"Failed to resolve 'api.x.io' ([Errno -3] Temporary failure in name "
     "resolution)\"))", "api.x.io"),
    ("ping: data.example: Temporary failure in name resolution", "data.example"),
    ("urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>", ""),
    ("OSError: [Errno 101] Network is unreachable", ""),
])
def test_the_network_off_note_names_the_host_once(output, host):
    notes = NetworkNotes(AllowWords())
    said = notes.take(output, network_off=True)
    assert said.startswith("[lis-tui] The sandbox's network is off: ")
    assert (f"{host} cannot be reached" if host else "no host can be reached") in said
    assert notes.take(output, network_off=True) == ""


def test_nothing_is_said_for_other_output_or_with_a_proxy():
    notes = NetworkNotes(AllowWords())
    assert notes.take("hello\n", network_off=True) == ""
    assert notes.take("curl: (6) Could not resolve host: pypi.org", network_off=False) == ""


class Note:
    def __init__(self, by, text):
        self.by, self.text = by, text


def test_a_refusal_is_said_once_and_a_withdrawn_question_not_at_all():
    notes = NetworkNotes(AllowWords())
    notes.refused(Note("headless", "Network access to a:443 was refused"))
    notes.refused(Note("headless", "Network access to a:443 was refused"))
    notes.refused(Note("gone", "the request ended"))
    assert notes.take("", network_off=False) == "[lis-tui] Network access to a:443 was refused."
    assert notes.take("", network_off=False) == ""
