"""`code_catalog.ensure_allowed_code` fails closed on facts that are not complete.

Its contract is to be called once `missing_facts` finds nothing left to look up and
`read_constraints` has read every known domain's CHECK constraints, as the verifier does.
Called earlier (a type never looked up, a domain whose constraints were never read), it
refuses rather than allowing what it has not seen: these tests call it so, directly.
"""

import pytest

from mcp_server_suite.tools.sql import code_catalog
from mcp_server_suite.tools.sql.resolution import ResolvedCode

USER_TYPE = 40000
DOMAIN = 40001


def _catalog() -> code_catalog.CodeCatalog:
    return code_catalog.CodeCatalog(15, frozenset(), frozenset(), frozenset(), frozenset())


def test_a_type_whose_facts_were_never_read_is_refused() -> None:
    facts = code_catalog.ObjectFacts()
    code = ResolvedCode(types={USER_TYPE})
    assert code_catalog.missing_facts(code, facts) == (frozenset({USER_TYPE}), frozenset())
    with pytest.raises(code_catalog.RefusedObject) as caught:
        code_catalog.ensure_allowed_code(code, _catalog(), facts)
    assert (caught.value.kind, caught.value.oid, caught.value.use) == ("type", USER_TYPE, "a type")


def test_a_domain_whose_constraints_were_never_read_is_refused() -> None:
    check = "{CONST :consttype 16 :constisnull false :constvalue 1 [ 1 0 0 0 0 0 0 0 ]}"
    facts = code_catalog.ObjectFacts()
    facts.add_rows([("t", DOMAIN, [0] * 9, [0, 23, 0, 0], [check], "d")])
    code = ResolvedCode(types={DOMAIN})
    with pytest.raises(code_catalog.RefusedObject) as caught:
        code_catalog.ensure_allowed_code(code, _catalog(), facts)
    assert (caught.value.kind, caught.value.oid, caught.value.use) == ("domain", DOMAIN, "a domain")
    # Once read, the same CHECK (a constant) is allowed.
    code_catalog.read_constraints(facts)
    code_catalog.ensure_allowed_code(code, _catalog(), facts)
