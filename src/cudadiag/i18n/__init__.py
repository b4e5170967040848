"""cudadiag in the user's language: the message catalogue, the language choice, and the
sentences kept in records (docs/languages.md)."""

from cudadiag.i18n.catalog import (
    N_,
    _,
    choose,
    current,
    current_code,
    describe,
    join_clauses,
    join_items,
    ngettext,
    unsupported,
    using,
)
from cudadiag.i18n.texts import Text, localize, localize_all, msg

__all__ = ["N_", "Text", "_", "choose", "current", "current_code", "describe", "join_clauses",
           "join_items", "localize", "localize_all", "msg", "ngettext", "unsupported", "using"]
