"""Routes a Python agent's calls to the providers' own hosts through the rollout URL.

`lightning run`, `dataset run` and Debug with Lightning put this folder first on PYTHONPATH, so Python
imports this module at start-up (the `site` module's `sitecustomize` hook). When LIGHTNING_URL is set, an
`httpx` (or `httpx2`) or `requests` request to api.openai.com, api.anthropic.com or generativelanguage.googleapis.com,
on a path the rollout URL serves, goes to $LIGHTNING_URL instead: a base URL written into the agent's code
is captured too. The request is otherwise sent as it was (method, headers, body, streaming); every other
request is untouched. Neither library is imported here: each is patched when the agent imports it. The
`sitecustomize` this one shadows (a distribution's, a virtualenv's) is run after it, as it would have been.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
from urllib.parse import urlsplit

# The same table as trainer-daemon/capture/fetchRouting.ts (the Node preload).
_ROUTED = {
    "api.openai.com": re.compile(r"^/v1/(?:chat/completions|completions|responses|embeddings|models)$"),
    "api.anthropic.com": re.compile(r"^/v1/(?:messages|models)(?:/|$)"),
    "generativelanguage.googleapis.com": re.compile(r"^/v1(?:beta|alpha)/models/"),
}
_HERE = os.path.dirname(os.path.abspath(__file__))


def rerouted_url(url, lightning_url):
    """The rollout URL for a request to `url`, or None when the request is not one to reroute."""
    try:
        parts = urlsplit(str(url))
        port = parts.port
    except ValueError:
        return None
    paths = _ROUTED.get(parts.hostname or "")
    if parts.scheme != "https" or port is not None or parts.username is not None:
        return None
    if paths is None or not paths.match(parts.path):
        return None
    return lightning_url.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")


def _patch_httpx(module, lightning_url):
    def reroute(request):
        target = rerouted_url(request.url, lightning_url)
        if target is not None:
            request.url = module.URL(target)
            request.headers["host"] = urlsplit(target).netloc

    sync_send = module.HTTPTransport.handle_request
    async_send = module.AsyncHTTPTransport.handle_async_request

    def handle_request(self, request):
        reroute(request)
        return sync_send(self, request)

    async def handle_async_request(self, request):
        reroute(request)
        return await async_send(self, request)

    module.HTTPTransport.handle_request = handle_request
    module.AsyncHTTPTransport.handle_async_request = handle_async_request


def _patch_requests_adapters(module, lightning_url):
    send = module.HTTPAdapter.send

    def routed_send(self, request, *args, **kwargs):
        target = rerouted_url(request.url, lightning_url)
        if target is not None:
            request.url = target
        return send(self, request, *args, **kwargs)

    module.HTTPAdapter.send = routed_send


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs a patch right after a module is first imported, by wrapping the loader that imports it."""

    def __init__(self, patches):
        self._patches = patches

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self._patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            # A loader of the old protocol (load_module only) is left alone: the module loads unpatched.
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Patched(spec.loader, self._patches.pop(fullname))
                return spec
            return None
        return None


class _Patched(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)


def _install(lightning_url):
    patches = {
        "httpx": lambda module: _patch_httpx(module, lightning_url),
        # The fork recent openai, anthropic and google-genai releases use in httpx's place, with its API.
        "httpx2": lambda module: _patch_httpx(module, lightning_url),
        "requests.adapters": lambda module: _patch_requests_adapters(module, lightning_url),
    }
    for name in list(patches):
        if name in sys.modules:
            patches.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport(patches))


def _run_shadowed_sitecustomize():
    """Imports the next `sitecustomize` on sys.path (the one this module hides), if there is one."""
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.dirname(os.path.abspath(spec.origin or "")) == _HERE:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("LIGHTNING_URL"):
    _install(os.environ["LIGHTNING_URL"])
_run_shadowed_sitecustomize()
