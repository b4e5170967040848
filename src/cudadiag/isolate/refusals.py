"""Why a fork server refuses a run: the kinds its `refused KIND [MODULE]` answer carries
(isolate/forkserver.py's protocol) and the sentence the parent says for each, in the user's
language."""

from __future__ import annotations

from cudadiag.i18n import N_, _

CUDA_INITIALISED = "cuda-initialised"
IMPORT_INITIALISED_CUDA = "import-initialised-cuda"
MODULE_CHANGED = "module-changed"
SENTENCES = {
    CUDA_INITIALISED: N_("CUDA was initialised in the warm interpreter"),
    IMPORT_INITIALISED_CUDA: N_("importing {module} initialised CUDA"),
    MODULE_CHANGED: N_("installed module {module} changed on disk since it was imported"),
}
"""Each kind's sentence; `{module}` is the module the refusal names."""


def answer(kind: str, module: str = "") -> str:
    """Return the server's answer line (without its newline) refusing a run for `kind`
    (one of SENTENCES' keys), about `module` when the kind names one."""
    return f"refused {kind} {module}".rstrip()


def sentence(kind: str, module: str = "") -> str:
    """Return the refusal said in the current language; a kind this version does not know
    (a server from another version) is given as it came."""
    if kind not in SENTENCES:
        return f"{kind} {module}".rstrip()
    return _(SENTENCES[kind]).format(module=module)
