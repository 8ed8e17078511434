"""What a query resolved to: every function, operator, type and relation its tree names.

PostgreSQL resolves a statement's names when it analyses it: `(expr).f` becomes a call of
`f`, `t.f` may too, an implicit cast is a call of the cast's function, an operator is the
function behind it, a view is its stored query. The tree it prints after analysis and
rewriting (`debug_print_rewritten`) names all of that by object id. This module reads such a
tree (`node_text.py`) and collects, from every node, each object id that names code.

Rules:

1. Allowlist. Every node label must be in `NODE_FIELDS`, and every field of a node must be
   listed there for that label, with its kind: a child to walk, a function, an operator, a
   type, a relation, a harmless scalar or list, or a field that must be empty (what a
   read-only query never holds: a utility statement, row marks, a result relation). A node
   or field a later PostgreSQL adds is refused until it is reviewed, as in `policy.py`.
2. Every query level must be a SELECT (`commandType` 1); data-modifying CTEs, XML
   constructors, sequence calls (`NextValueExpr`), XMLTABLE and bind parameters are labels
   or values outside the allowlist.
3. Views. A view's stored query is part of the tree, and is checked like the caller's, but
   for relations: a view may read tables of any schema its owner chose, so only the
   relations the caller's own query levels name are collected. The stored query of a view
   created by initdb (object id below `FIRST_USER_OID`: `pg_catalog` and
   `information_schema`) is trusted code, like a built-in function, and is not walked.
   PostgreSQL 16 and later mark a view's query by the `relid` of its subquery entry;
   PostgreSQL 15 by the view's own `OLD` entry in that query's range table (a relation
   entry that is not in the FROM clause, which a caller's query never holds). Row-level
   security quals are the table owner's, and are walked like a view's query.
4. Types. Every type named anywhere is collected; those whose input function runs on the
   caller's text (a constant's type, the target of an I/O cast) and the domains coerced to
   are collected apart, since they run more code (`code_catalog.py`).
5. Refusals are `ResolutionError`s naming the construct; never any other exception.
6. Work the statement timeout cannot stop: a value read from a table compared with every
   element of an array the query does not write out is refused (`array_comparison.py`).
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from mcp_server_suite.tools.sql.array_comparison import (
    UNBOUNDED_ARRAY_COMPARISON,
    UNBOUNDED_ARRAY_COMPARISON_ADVICE,
    is_unbounded,
)
from mcp_server_suite.tools.sql.node_text import Datum, Node, TypedList, Value

__all__ = [
    "FIRST_USER_OID",
    "NODE_FIELDS",
    "ResolutionError",
    "ResolvedCode",
    "collect_resolved_code",
]

# PostgreSQL's FirstNormalObjectId: everything initdb creates has a smaller object id.
FIRST_USER_OID: Final = 16384

# Field kinds (Rule 1).
_WALK: Final = "N"  # A node, a list of nodes, or null: walked.
_FUNCTION: Final = "F"  # A function's object id (0 for none).
_OPERATOR: Final = "O"  # An operator's object id (0 for none).
_OPERATORS: Final = "OL"  # A list of operators' object ids.
_TYPE: Final = "T"  # A type's object id.
_INPUT_TYPE: Final = "TI"  # A type whose input function runs on the caller's text.
_DOMAIN: Final = "TD"  # A type coerced to: a domain's constraints run.
_TYPES: Final = "TL"  # A list of types' object ids.
_RELATION: Final = "R"  # A range-table entry's relation (Rule 3).
_SCALAR: Final = "S"  # A harmless scalar: flags, counts, names, typmods, collations.
_LIST: Final = "L"  # A harmless list: names, column numbers, collations, bitmapsets.
_EMPTY: Final = "Z"  # Must be null, zero, false or empty (Rule 1).

# The node labels of an analysed and rewritten SELECT (PostgreSQL 15 to 18), with the kind of
# every field each may hold. Compiled from primnodes.h and parsenodes.h of each major (the
# outfuncs each major writes); a field one major lacks is simply absent there.
_SPEC: Final = {
    "QUERY": "commandType:S querySource:S canSetTag:S utilityStmt:Z resultRelation:Z "
    "hasAggs:S hasWindowFuncs:S hasTargetSRFs:S hasSubLinks:S hasDistinctOn:S hasRecursive:S "
    "hasModifyingCTE:Z hasForUpdate:Z hasRowSecurity:S hasGroupRTE:S isReturn:S cteList:N "
    "rtable:N rteperminfos:N jointree:N targetList:N override:S onConflict:Z returningList:Z "
    "groupClause:N groupDistinct:S groupingSets:N havingQual:N windowClause:N "
    "distinctClause:N sortClause:N limitOffset:N limitCount:N limitOption:S rowMarks:Z "
    "setOperations:N constraintDeps:L withCheckOptions:Z mergeActionList:Z "
    "mergeUseOuterJoin:S mergeTargetRelation:Z mergeJoinCondition:Z returningOldAlias:Z "
    "returningNewAlias:Z stmt_location:S stmt_len:S",
    "RANGETBLENTRY": "alias:N eref:N rtekind:S relid:R relkind:S rellockmode:S "
    "perminfoindex:S tablesample:N subquery:N security_barrier:S jointype:S "
    "joinmergedcols:S joinaliasvars:N joinleftcols:L joinrightcols:L join_using_alias:N "
    "functions:N funcordinality:S tablefunc:N values_lists:N coltypes:TL coltypmods:L "
    "colcollations:L ctename:S ctelevelsup:S self_reference:S enrname:Z enrtuples:S "
    "groupexprs:N lateral:S inh:S inFromCl:S requiredPerms:S checkAsUser:S selectedCols:L "
    "insertedCols:L updatedCols:L extraUpdatedCols:L securityQuals:N",
    "RTEPERMISSIONINFO": "relid:S inh:S requiredPerms:S checkAsUser:S selectedCols:L "
    "insertedCols:L updatedCols:L",
    "RANGETBLFUNCTION": "funcexpr:N funccolcount:S funccolnames:L funccoltypes:TL "
    "funccoltypmods:L funccolcollations:L funcparams:L",
    "TABLESAMPLECLAUSE": "tsmhandler:F args:N repeatable:N",
    "ALIAS": "aliasname:S colnames:L",
    "FROMEXPR": "fromlist:N quals:N",
    "JOINEXPR": "jointype:S isNatural:S larg:N rarg:N usingClause:L join_using_alias:N "
    "quals:N alias:N rtindex:S",
    "RANGETBLREF": "rtindex:S",
    "TARGETENTRY": "expr:N resno:S resname:S ressortgroupref:S resorigtbl:S resorigcol:S resjunk:S",
    "SORTGROUPCLAUSE": "tleSortGroupRef:S eqop:O sortop:O reverse_sort:S nulls_first:S hashable:S",
    "GROUPINGSET": "kind:S content:L location:S",
    "WINDOWCLAUSE": "name:S refname:S partitionClause:N orderClause:N frameOptions:S "
    "startOffset:N endOffset:N runCondition:N startInRangeFunc:F endInRangeFunc:F "
    "inRangeColl:S inRangeAsc:S inRangeNullsFirst:S winref:S copiedOrder:S",
    "COMMONTABLEEXPR": "ctename:S aliascolnames:L ctematerialized:S ctequery:N "
    "search_clause:N cycle_clause:N location:S cterecursive:S cterefcount:S ctecolnames:L "
    "ctecoltypes:TL ctecoltypmods:L ctecolcollations:L",
    "CTESEARCHCLAUSE": "search_col_list:L search_breadth_first:S search_seq_column:S location:S",
    "CTECYCLECLAUSE": "cycle_col_list:L cycle_mark_column:S cycle_mark_value:N "
    "cycle_mark_default:N cycle_path_column:S location:S cycle_mark_type:T "
    "cycle_mark_typmod:S cycle_mark_collation:S cycle_mark_neop:O",
    "SETOPERATIONSTMT": "op:S all:S larg:N rarg:N colTypes:TL colTypmods:L colCollations:L "
    "groupClauses:N",
    "VAR": "varno:S varattno:S vartype:T vartypmod:S varcollid:S varnullingrels:L "
    "varlevelsup:S varreturningtype:S varnosyn:S varattnosyn:S location:S",
    "CONST": "consttype:TI consttypmod:S constcollid:S constlen:S constbyval:S "
    "constisnull:S location:S constvalue:S",
    "PARAM": "paramkind:S paramid:S paramtype:T paramtypmod:S paramcollid:S location:S",
    "AGGREF": "aggfnoid:F aggtype:T aggcollid:S inputcollid:S aggtranstype:T "
    "aggargtypes:TL aggdirectargs:N args:N aggorder:N aggdistinct:N aggfilter:N aggstar:S "
    "aggvariadic:S aggkind:S aggpresorted:S agglevelsup:S aggsplit:S aggno:S aggtransno:S "
    "location:S",
    "GROUPINGFUNC": "args:N refs:L cols:L agglevelsup:S location:S",
    "WINDOWFUNC": "winfnoid:F wintype:T wincollid:S inputcollid:S args:N aggfilter:N "
    "runCondition:N winref:S winstar:S winagg:S location:S",
    "SUBSCRIPTINGREF": "refcontainertype:T refelemtype:T refrestype:T reftypmod:S "
    "refcollid:S refupperindexpr:N reflowerindexpr:N refexpr:N refassgnexpr:Z",
    "FUNCEXPR": "funcid:F funcresulttype:T funcretset:S funcvariadic:S funcformat:S "
    "funccollid:S inputcollid:S args:N location:S",
    "NAMEDARGEXPR": "arg:N name:S argnumber:S location:S",
    "OPEXPR": "opno:O opfuncid:F opresulttype:T opretset:S opcollid:S inputcollid:S "
    "args:N location:S",
    "DISTINCTEXPR": "opno:O opfuncid:F opresulttype:T opretset:S opcollid:S inputcollid:S "
    "args:N location:S",
    "NULLIFEXPR": "opno:O opfuncid:F opresulttype:T opretset:S opcollid:S inputcollid:S "
    "args:N location:S",
    "SCALARARRAYOPEXPR": "opno:O opfuncid:F hashfuncid:F negfuncid:F useOr:S "
    "inputcollid:S args:N location:S",
    "BOOLEXPR": "boolop:S args:N location:S",
    "SUBLINK": "subLinkType:S subLinkId:S testexpr:N operName:L subselect:N location:S",
    "FIELDSELECT": "arg:N fieldnum:S resulttype:T resulttypmod:S resultcollid:S",
    "RELABELTYPE": "arg:N resulttype:T resulttypmod:S resultcollid:S relabelformat:S location:S",
    "COERCEVIAIO": "arg:N resulttype:TI resultcollid:S coerceformat:S location:S",
    "ARRAYCOERCEEXPR": "arg:N elemexpr:N resulttype:T resulttypmod:S resultcollid:S "
    "coerceformat:S location:S",
    "CONVERTROWTYPEEXPR": "arg:N resulttype:T convertformat:S location:S",
    "COLLATEEXPR": "arg:N collOid:S location:S",
    "CASEEXPR": "casetype:T casecollid:S arg:N args:N defresult:N location:S",
    "CASEWHEN": "expr:N result:N location:S",
    "CASETESTEXPR": "typeId:T typeMod:S collation:S",
    "ARRAYEXPR": "array_typeid:T array_collid:S element_typeid:T elements:N multidims:S "
    "list_start:S list_end:S location:S",
    "ROWEXPR": "args:N row_typeid:T row_format:S colnames:L location:S",
    "ROWCOMPAREEXPR": "rctype:S cmptype:S opnos:OL opfamilies:L inputcollids:L largs:N rargs:N",
    "COALESCEEXPR": "coalescetype:T coalescecollid:S args:N location:S",
    "MINMAXEXPR": "minmaxtype:T minmaxcollid:S inputcollid:S op:S args:N location:S",
    "SQLVALUEFUNCTION": "op:S type:T typmod:S location:S",
    "NULLTEST": "arg:N nulltesttype:S argisrow:S location:S",
    "BOOLEANTEST": "arg:N booltesttype:S location:S",
    "COERCETODOMAIN": "arg:N resulttype:TD resulttypmod:S resultcollid:S "
    "coercionformat:S location:S",
    "COERCETODOMAINVALUE": "typeId:T typeMod:S collation:S location:S",
    "TABLEFUNC": "functype:S ns_uris:Z ns_names:Z docexpr:N rowexpr:N colnames:L "
    "coltypes:TL coltypmods:L colcollations:L colexprs:N coldefexprs:N colvalexprs:N "
    "passingvalexprs:N notnulls:L plan:N ordinalitycol:S location:S",
    "JSONFORMAT": "format_type:S encoding:S location:S",
    "JSONRETURNING": "format:N typid:TI typmod:S",
    "JSONVALUEEXPR": "raw_expr:N formatted_expr:N format:N",
    "JSONCONSTRUCTOREXPR": "type:S args:N func:N coercion:N returning:N absent_on_null:S "
    "unique:S location:S",
    "JSONISPREDICATE": "expr:N format:N item_type:S unique_keys:S location:S",
    "JSONBEHAVIOR": "btype:S expr:N coerce:S location:S",
    "JSONEXPR": "op:S column_name:S formatted_expr:N format:N path_spec:N returning:N "
    "passing_names:L passing_values:N on_empty:N on_error:N use_io_coercion:S "
    "use_json_coercion:S wrapper:S omit_quotes:S collation:S location:S",
    "JSONTABLEPATH": "value:N name:S",
    "JSONTABLEPATHSCAN": "path:N errorOnError:S child:N colMin:S colMax:S",
    "JSONTABLESIBLINGJOIN": "lplan:N rplan:N",
}

NODE_FIELDS: Final[Mapping[str, Mapping[str, str]]] = MappingProxyType(
    {
        label: MappingProxyType(dict(item.split(":") for item in spec.split()))
        for label, spec in _SPEC.items()
    }
)

# What the caller is told of the refused labels met most often.
_REFUSED_LABELS: Final = MappingProxyType(
    {
        "XMLEXPR": "an XML constructor",
        "NEXTVALUEEXPR": "a sequence's next value",
        "SETTODEFAULT": "a column default",
        "CURRENTOFEXPR": "WHERE CURRENT OF",
        "MERGESUPPORTFUNC": "MERGE",
        "RETURNINGEXPR": "RETURNING",
        "PARAMREF": "a bind parameter",
    }
)

# Range-table entry kinds (RTEKind): a relation, a subquery, a join, a function in FROM, a
# table function (JSON_TABLE), VALUES, a CTE reference, a FROM-less SELECT's result, and
# PostgreSQL 18's grouping step. Missing on purpose: 7, a named tuplestore (trigger
# transition tables), which a SELECT never holds.
_RTE_KINDS: Final = frozenset({"0", "1", "2", "3", "4", "5", "6", "8", "9"})
# The query kind of a SELECT (CmdType CMD_SELECT).
_SELECT: Final = "1"
# How a FuncExpr was written when it is a cast (CoercionForm: explicit, implicit).
_CAST_FORMATS: Final = frozenset({"1", "2"})
# The kind of a Param built for a sublink (PARAM_SUBLINK); a bind parameter is refused.
_SUBLINK_PARAM: Final = "2"
# The table function kind of JSON_TABLE (TFT_JSON_TABLE); XMLTABLE is refused.
_JSON_TABLE: Final = "1"
# What an empty field may be written as.
_EMPTY_VALUES: Final = frozenset({"0", "false"})


class ResolutionError(ValueError):
    """The tree holds a construct this module does not check (Rule 5).

    Attributes:
        construct: What the caller is told it was.
        advice: What to write instead, as a sentence, where there is something.
    """

    def __init__(self, construct: str, advice: str | None = None) -> None:
        super().__init__(construct)
        self.construct = construct
        self.advice = advice


@dataclass(slots=True)
class ResolvedCode:
    """Every object id of a resolved query that names code, by kind.

    Attributes:
        functions: Functions, with how the query reached each (`call`, `cast`,
            `aggregate`, ...).
        operators: Operators, with how the query reached each.
        types: Every type named.
        input_types: Types whose input function runs on the caller's text (Rule 4).
        domains: Domains the query coerces to.
        relations: The relations the caller's own query levels read (Rule 3).
        views: The views, other than initdb's, whose stored queries were walked.
    """

    functions: dict[int, str] = field(default_factory=dict)
    operators: dict[int, str] = field(default_factory=dict)
    types: set[int] = field(default_factory=set)
    input_types: set[int] = field(default_factory=set)
    domains: set[int] = field(default_factory=set)
    relations: set[int] = field(default_factory=set)
    views: set[int] = field(default_factory=set)


def collect_resolved_code(tree: Value) -> ResolvedCode:
    """Collect what a rewritten query tree names (Rules 1 to 4).

    Args:
        tree: `node_text.read_node_text` of the tree: a list of one `QUERY` node, or a node
            (a stored expression such as a domain's CHECK).

    Returns:
        The object ids, by kind.

    Raises:
        ResolutionError: A node, field or value is not one the allowlist holds.
    """
    found = ResolvedCode()
    # (value, the caller's own query level?) pairs still to visit.
    pending: list[tuple[Value, bool]] = [(tree, True)]
    while pending:
        value, own = pending.pop()
        if isinstance(value, list):
            pending.extend((item, own) for item in value)
        elif isinstance(value, Node):
            _visit(value, own, found, pending)
        elif isinstance(value, TypedList | Datum) or value is None:
            continue
        # A bare token in a list of nodes is a Value node (a name, a number): harmless.
    return found


def _visit(node: Node, own: bool, found: ResolvedCode, pending: list[tuple[Value, bool]]) -> None:
    fields = NODE_FIELDS.get(node.label)
    if fields is None:
        shown = _REFUSED_LABELS.get(node.label, f"a construct PostgreSQL calls {node.label[:40]}")
        raise ResolutionError(shown)
    values = node.fields
    walked = _special(node, own, found, pending)
    if walked is None:
        return
    own = walked
    for name, value in values.items():
        kind = fields.get(name)
        if kind is None:
            raise ResolutionError(f"a construct PostgreSQL calls {node.label[:40]}.{name[:40]}")
        if kind == _WALK:
            if isinstance(value, Node | list) or value is None:
                if node.label == "RANGETBLENTRY" and name == "securityQuals":
                    pending.append((value, False))
                elif not (node.label == "RANGETBLENTRY" and name == "subquery"):
                    pending.append((value, own))
                continue
            raise ResolutionError(f"a malformed {node.label[:40]}")
        _field(node.label, name, kind, value, found)


def _special(
    node: Node, own: bool, found: ResolvedCode, pending: list[tuple[Value, bool]]
) -> bool | None:
    # The checks of the labels with rules of their own; returns whether what the node holds
    # is the caller's own, or None when it is a trusted view's query, not to be walked.
    values = node.fields
    if node.label == "QUERY":
        if values.get("commandType") != _SELECT:
            raise ResolutionError("a statement other than SELECT")
        view = _view_of_query(values)
        if view is None:
            return own
        # PostgreSQL 15 marks a view's stored query by its OLD entry (Rule 3).
        if view < FIRST_USER_OID:
            return None
        if own:
            found.relations.add(view)
        found.views.add(view)
        return False
    if node.label == "RANGETBLENTRY":
        return _range_entry(values, own, found, pending)
    if node.label == "FUNCEXPR" and values.get("funcformat") in _CAST_FORMATS:
        found.functions.setdefault(_oid(values.get("funcid", "0")), "a cast")
    if node.label == "PARAM" and values.get("paramkind") != _SUBLINK_PARAM:
        raise ResolutionError("a bind parameter")
    if node.label == "TABLEFUNC" and values.get("functype") != _JSON_TABLE:
        raise ResolutionError("XMLTABLE")
    if node.label == "SCALARARRAYOPEXPR" and is_unbounded(node):
        raise ResolutionError(UNBOUNDED_ARRAY_COMPARISON, UNBOUNDED_ARRAY_COMPARISON_ADVICE)
    return own


def _range_entry(
    values: dict[str, Value], own: bool, found: ResolvedCode, pending: list[tuple[Value, bool]]
) -> bool:
    # A range-table entry: its kind, its relation and (Rule 3) whether its subquery is a
    # view's stored query; returns whether what it holds is the caller's own.
    kind = values.get("rtekind")
    if kind not in _RTE_KINDS:
        raise ResolutionError("a range-table entry of a kind a SELECT never holds")
    relid = _oid(values.get("relid", "0"))
    if kind == "0" and own and relid:
        found.relations.add(relid)
    if kind == "1":
        subquery = values.get("subquery")
        if relid:
            # PostgreSQL 16 and later: this subquery is the stored query of view `relid`.
            if relid < FIRST_USER_OID:
                return own
            if own:
                found.relations.add(relid)
            found.views.add(relid)
            pending.append((subquery, False))
        else:
            pending.append((subquery, own))
    return own


def _view_of_query(values: dict[str, Value]) -> int | None:
    # The view whose stored query this is, on PostgreSQL 15 (its OLD entry), or None.
    rtable = values.get("rtable")
    if not isinstance(rtable, list):
        return None
    for entry in rtable:
        if not isinstance(entry, Node) or entry.label != "RANGETBLENTRY":
            continue
        fields = entry.fields
        if (
            fields.get("rtekind") == "0"
            and fields.get("relkind") == "v"
            and fields.get("inFromCl") == "false"
        ):
            return _oid(fields.get("relid"))
    return None


def _field(label: str, name: str, kind: str, value: Value, found: ResolvedCode) -> None:
    # One scalar or list field of a node, by its kind.
    if kind in _PLAIN_KINDS:
        if not _PLAIN_KINDS[kind](value):
            if kind == _EMPTY:
                raise ResolutionError(_EMPTY_FIELDS.get(name, f"{label[:40]}.{name[:40]}"))
            raise ResolutionError(f"a malformed {label[:40]}")
        return
    if kind in (_TYPES, _OPERATORS):
        single = _OPERATOR if kind == _OPERATORS else _TYPE
        for oid in _oids(value):
            _object(label, name, single, oid, found)
        return
    _object(label, name, kind, _oid(value), found)


def _object(label: str, name: str, kind: str, oid: int, found: ResolvedCode) -> None:
    # One object id, recorded by its kind (0 names nothing).
    if not oid or kind == _RELATION:
        # A relation is decided with its entry's kind (`_range_entry`).
        return
    if kind == _FUNCTION:
        found.functions.setdefault(oid, _FUNCTION_USES.get((label, name), "a call"))
    elif kind == _OPERATOR:
        found.operators.setdefault(oid, _OPERATOR_USES.get(label, "an operator"))
    else:
        found.types.add(oid)
        if kind == _INPUT_TYPE:
            found.input_types.add(oid)
        elif kind == _DOMAIN:
            found.domains.add(oid)


def _is_scalar(value: Value) -> bool:
    return isinstance(value, str | Datum) or value is None


def _is_list(value: Value) -> bool:
    return isinstance(value, list | TypedList) or value is None


def _is_empty(value: Value) -> bool:
    return value is None or value == [] or (isinstance(value, str) and value in _EMPTY_VALUES)


# The kinds whose values name nothing, and the test each value must pass.
_PLAIN_KINDS: Final = MappingProxyType({_SCALAR: _is_scalar, _LIST: _is_list, _EMPTY: _is_empty})


# How a query reaches a function or an operator, for the refusal's wording.
_FUNCTION_USES: Final = MappingProxyType(
    {
        ("AGGREF", "aggfnoid"): "an aggregate",
        ("WINDOWFUNC", "winfnoid"): "a window function",
        ("TABLESAMPLECLAUSE", "tsmhandler"): "a TABLESAMPLE method",
        ("WINDOWCLAUSE", "startInRangeFunc"): "a window frame's RANGE offset",
        ("WINDOWCLAUSE", "endInRangeFunc"): "a window frame's RANGE offset",
        ("OPEXPR", "opfuncid"): "an operator",
        ("DISTINCTEXPR", "opfuncid"): "IS DISTINCT FROM",
        ("NULLIFEXPR", "opfuncid"): "NULLIF",
        ("SCALARARRAYOPEXPR", "opfuncid"): "an operator over an array",
        ("SCALARARRAYOPEXPR", "hashfuncid"): "an operator over an array",
        ("SCALARARRAYOPEXPR", "negfuncid"): "an operator over an array",
    }
)
_OPERATOR_USES: Final = MappingProxyType(
    {
        "SORTGROUPCLAUSE": "ORDER BY, GROUP BY or DISTINCT",
        "DISTINCTEXPR": "IS DISTINCT FROM",
        "NULLIFEXPR": "NULLIF",
        "ROWCOMPAREEXPR": "a row comparison",
        "CTECYCLECLAUSE": "a CYCLE clause",
    }
)
_EMPTY_FIELDS: Final = MappingProxyType(
    {
        "utilityStmt": "a statement other than SELECT",
        "resultRelation": "a statement other than SELECT",
        "hasModifyingCTE": "a data-modifying WITH",
        "hasForUpdate": "a row lock (FOR UPDATE, FOR SHARE)",
        "rowMarks": "a row lock (FOR UPDATE, FOR SHARE)",
        "enrname": "a transition table",
        "ns_uris": "XMLTABLE",
        "ns_names": "XMLTABLE",
        "refassgnexpr": "an assignment",
    }
)


def _oid(value: Value) -> int:
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        raise ResolutionError("a malformed object id")
    return int(value)


def _oids(value: Value) -> Iterator[int]:
    if value is None:
        return
    if isinstance(value, TypedList) and value.kind == "o":
        yield from value.items
        return
    raise ResolutionError("a malformed list of object ids")
