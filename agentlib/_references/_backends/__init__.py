"""Where a session's verbs go: the backends behind :class:`~agentlib.Session` and
:class:`~agentlib.Turn`.

A reference writes each verb once and hands it to its backend (``_base.Backend``): the
runtime that holds the session (``_local.LocalBackend``), which sends what another runtime
holds on a shared store to that runtime (``_shared.SharedBackend``), or a server over HTTP
(``agentlib._http._client.HTTPBackend``).
"""
