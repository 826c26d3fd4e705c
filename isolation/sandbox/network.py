"""The sandbox's network: its policy, the proxy it is attached to while the network is not off,
and the credentials the proxy adds (read, with the CA bundle the sandbox trusts, before the start
plans the mounts). The net package is imported only when a sandbox needs it (no asyncio else)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..net.policy import NetworkPolicy
    from . import Sandbox


def set_network(sandbox: Sandbox, mode: str) -> None:
    """Change the network mode while the sandbox runs, no restart; `off` closes open connections.
    Turned on for the first time, the proxy variables join `env`: a shell started earlier must
    export them (`network.env`)."""
    sandbox._network_policy().set_mode(mode)
    if mode != "off" and sandbox.network is None and sandbox.running:
        sandbox._open_network()


def _network_policy(sandbox: Sandbox) -> NetworkPolicy:
    if sandbox.policy is None:
        from ..net.policy import NetworkPolicy  # noqa: PLC0415 (no network, no asyncio import)

        sandbox.policy = NetworkPolicy(sandbox.spec.network, sandbox.spec.allow_hosts, sandbox.spec.deny_hosts)
    return sandbox.policy


def _prepare_credentials(sandbox: Sandbox) -> Path | None:
    """Read the configured secrets now (a missing one stops the start, naming it) and write the
    CA bundle the sandbox will trust; None without credentials."""
    if not sandbox.spec.credentials:
        return None
    from ..net.credentials import CredentialSet, resolve  # noqa: PLC0415
    from ..net.proxy import default_proxy  # noqa: PLC0415

    sandbox._credentials = CredentialSet(resolve(sandbox.spec.credentials))
    bundle = default_proxy().ca.bundle()
    trust = (sandbox._session.dir if sandbox._session is not None else sandbox._record.make_dir()) / "trust"
    trust.mkdir(mode=0o700, exist_ok=True)
    (trust / "ca-bundle.pem").write_bytes(bundle)
    return trust / "ca-bundle.pem"


def _open_network(sandbox: Sandbox) -> None:
    from ..net.proxy import default_proxy  # noqa: PLC0415

    sandbox.network = default_proxy().attach(sandbox, sandbox._network_policy(),  # the spec's, unless one was given
                                             label=f"sandbox {sandbox._record.id}", credentials=sandbox._credentials)
    sandbox.env = sandbox.network.environment(sandbox.env)
