"""Which functions a `read_only_sql` query may call: a reviewed allowlist and a denylist.

Rules:

1. A function is callable only when it is known to be free of side effects. A denylist over
   names cannot be complete (every escape spelling nobody thought of gets through), so the
   policy refuses every function that is not in `BUILTIN_FUNCTIONS` or configured by the
   operator (`MCP_SQL_ALLOWED_FUNCTIONS`). SQL syntax that PostgreSQL's grammar turns into
   calls (`EXTRACT`, `SUBSTRING ... FROM`, `AT TIME ZONE`, ...) names `pg_catalog` functions
   of this list.
2. `DENIED_FUNCTIONS` and `DENIED_FUNCTION_PREFIXES` exist for their messages, and because
   they win over configuration: a function that acts outside the rolled-back read-only
   transaction is never callable, whatever the operator lists.
3. This module is data only. It imports nothing from the SQL stack, so configuration checks
   and documentation can read it without loading pglast or psycopg.

How `BUILTIN_FUNCTIONS` was built. `scripts/sql-function-candidates.sql`, run against
PostgreSQL 15, lists the 859 documented functions, aggregates and window functions of
pg_catalog that SQL can call. Removed from them, after review:

- every name with a volatile overload, except the reviewed harmless ones in
  `HARMLESS_VOLATILE` (clocks, random numbers, relation sizes);
- every name in `DENIED_FUNCTIONS` or starting with a `DENIED_FUNCTION_PREFIXES` entry, whatever
  its volatility: `txid_current` is stable yet takes a transaction id, and `table_to_xml` is
  stable yet runs SQL given as a string;
- every name in `UNINTERRUPTIBLE` (and the overloads in `UNINTERRUPTIBLE_OVERLOADS`): work
  that the statement timeout cannot stop and that grows faster than its input; the review
  of every reachable function is `tests/vectors/sql_interrupts.toml`, and
  `tests/unit/test_sql_interrupts.py` holds it to this module and measures each class;
- monitoring internals (`pg_stat_get_*`), whose views are the supported interface;
- functions that reveal server file paths or replication state, or only work inside event
  triggers, validators and support routines (`pg_relation_filepath`, `pg_config`,
  `pg_event_trigger_*`, `fmgr_*_validator`, `shell_in`, `satisfies_hash_partition`, ...);
- functions that inspect the pooled session itself (`pg_cursor`, `pg_prepared_statement`,
  `pg_listening_channels`): a caller has no business with the pool's state;
- `inet_server_addr` and `inet_server_port`, which reveal the database's address.

Four documented functions whose catalogue description reads "implementation of ... operator"
are added back: `array_cat`, `starts_with`, `inet_merge` and `inet_same_family`.
`format`, `lpad`, `rpad`, `repeat` and `array_fill` are allowed: each can build a value of up
to 1 GB (PostgreSQL's limit on any one value), and so can `||` in a recursive query or
`string_agg` over `generate_series`, which no policy over names can refuse; the bound on one
value is PostgreSQL's own, the time to build it is the statement timeout's, and what the
caller receives is the result bound's (`statement.py`). Refusing them bounded nothing.

Later majors. `ADDED_FUNCTIONS` holds what PostgreSQL 16, 17 and 18 added, reviewed the same
way (`scripts/sql-function-candidates.sql` on each major, compared with the one before), and
`REMOVED_FUNCTIONS` what a major no longer has; `callable_functions(major)` is the list of
one major. The policy (`policy.py`) accepts the names of every supported major, and the
second layer (`code_catalog.py`) only the connected server's, so that a name a major lacks
is refused with the major that has it.
`tests/unit/test_sql_catalog_lists.py` holds the lists against the running server: every
name exists on its major, no overload of any name is volatile unless the name is in
`HARMLESS_VOLATILE`, and every function of pg_catalog is allowed, implements an operator
(`operator_functions.py`), is support code no query names, or is denied with a reason.
"""

from types import MappingProxyType
from typing import Final

__all__ = [
    "ADDED_FUNCTIONS",
    "ALL_BUILTIN_FUNCTIONS",
    "BUILTIN_FUNCTIONS",
    "DENIED_FUNCTIONS",
    "DENIED_FUNCTION_PREFIXES",
    "ESCAPING_FUNCTIONS",
    "HARMLESS_VOLATILE",
    "OLDEST_MAJOR",
    "REMOVED_FUNCTIONS",
    "SUPPORT_FUNCTIONS",
    "UNINTERRUPTIBLE",
    "UNINTERRUPTIBLE_OVERLOADS",
    "UNLISTED_FUNCTIONS",
    "callable_functions",
    "denial_reason",
    "first_major_with",
]

# The oldest major whose catalog the lists were reviewed against; an older server is held to
# PostgreSQL 15's list (every later addition is absent from it, and its names exist there).
OLDEST_MAJOR: Final = 15

# Volatile built-ins that are harmless to call: they read clocks, draw random numbers or
# report sizes, and change nothing a later call could observe.
HARMLESS_VOLATILE: Final = frozenset(
    {
        "clock_timestamp",
        "gen_random_uuid",
        "pg_database_size",
        "pg_indexes_size",
        "pg_is_in_recovery",
        "pg_jit_available",
        "pg_partition_ancestors",
        "pg_partition_tree",
        "pg_relation_size",
        "pg_table_size",
        "pg_tablespace_size",
        "pg_total_relation_size",
        "random",
        "timeofday",
        # PostgreSQL 16: random draws.
        "array_sample",
        "array_shuffle",
        "random_normal",
        # PostgreSQL 18: new UUIDs, drawn at random or from the clock.
        "uuidv4",
        "uuidv7",
    }
)

# The reviewed built-ins of PostgreSQL 15 (pg_catalog), in alphabetical order. Calling any
# overload of these names is allowed; the module docstring says how they were chosen.
BUILTIN_FUNCTIONS: Final = frozenset(
    {
        "abbrev",
        "abs",
        "aclcontains",
        "acldefault",
        "aclexplode",
        "aclinsert",
        "aclremove",
        "acos",
        "acosd",
        "acosh",
        "age",
        "area",
        "array_agg",
        "array_append",
        "array_cat",
        "array_dims",
        "array_fill",
        "array_length",
        "array_lower",
        "array_ndims",
        "array_prepend",
        "array_remove",
        "array_replace",
        "array_to_json",
        "array_to_string",
        "array_to_tsvector",
        "array_upper",
        "ascii",
        "asin",
        "asind",
        "asinh",
        "atan",
        "atan2",
        "atan2d",
        "atand",
        "atanh",
        "avg",
        "bit",
        "bit_and",
        "bit_count",
        "bit_length",
        "bit_or",
        "bit_xor",
        "bool",
        "bool_and",
        "bool_or",
        "box",
        "bpchar",
        "broadcast",
        "btrim",
        "cardinality",
        "cash_words",
        "cbrt",
        "ceil",
        "ceiling",
        "center",
        "char",
        "char_length",
        "character_length",
        "chr",
        "cidr",
        "circle",
        "clock_timestamp",
        "col_description",
        "concat",
        "concat_ws",
        "convert",
        "convert_from",
        "convert_to",
        "corr",
        "cos",
        "cosd",
        "cosh",
        "cot",
        "cotd",
        "count",
        "covar_pop",
        "covar_samp",
        "cume_dist",
        "current_database",
        "current_schema",
        "current_schemas",
        "current_setting",
        "current_user",
        "date",
        "date_bin",
        "date_part",
        "date_trunc",
        "datemultirange",
        "daterange",
        "daterange_canonical",
        "daterange_subdiff",
        "decode",
        "degrees",
        "dense_rank",
        "dexp",
        "diagonal",
        "diameter",
        "div",
        "dlog1",
        "dlog10",
        "dround",
        "dtrunc",
        "encode",
        "enum_first",
        "enum_last",
        "enum_range",
        "every",
        "exp",
        "extract",
        "factorial",
        "family",
        "first_value",
        "float4",
        "float8",
        "floor",
        "format",
        "format_type",
        "gcd",
        "gen_random_uuid",
        "generate_series",
        "generate_subscripts",
        "get_bit",
        "get_byte",
        "get_current_ts_config",
        "getdatabaseencoding",
        "has_any_column_privilege",
        "has_column_privilege",
        "has_database_privilege",
        "has_foreign_data_wrapper_privilege",
        "has_function_privilege",
        "has_language_privilege",
        "has_parameter_privilege",
        "has_schema_privilege",
        "has_sequence_privilege",
        "has_server_privilege",
        "has_table_privilege",
        "has_tablespace_privilege",
        "has_type_privilege",
        "height",
        "host",
        "hostmask",
        "inet_client_addr",
        "inet_client_port",
        "inet_merge",
        "inet_same_family",
        "initcap",
        "int2",
        "int4",
        "int4multirange",
        "int4range",
        "int4range_canonical",
        "int4range_subdiff",
        "int8",
        "int8multirange",
        "int8range",
        "int8range_canonical",
        "int8range_subdiff",
        "interval",
        "is_normalized",
        "isclosed",
        "isempty",
        "isfinite",
        "ishorizontal",
        "isopen",
        "isparallel",
        "isperp",
        "isvertical",
        "json_agg",
        "json_array_elements",
        "json_array_elements_text",
        "json_array_length",
        "json_build_array",
        "json_build_object",
        "json_each",
        "json_each_text",
        "json_extract_path",
        "json_extract_path_text",
        "json_object",
        "json_object_agg",
        "json_object_keys",
        "json_populate_record",
        "json_populate_recordset",
        "json_strip_nulls",
        "json_to_record",
        "json_to_recordset",
        "json_to_tsvector",
        "json_typeof",
        "jsonb_agg",
        "jsonb_array_elements",
        "jsonb_array_elements_text",
        "jsonb_array_length",
        "jsonb_build_array",
        "jsonb_build_object",
        "jsonb_each",
        "jsonb_each_text",
        "jsonb_extract_path",
        "jsonb_extract_path_text",
        "jsonb_insert",
        "jsonb_object",
        "jsonb_object_agg",
        "jsonb_object_keys",
        "jsonb_path_exists",
        "jsonb_path_exists_tz",
        "jsonb_path_match",
        "jsonb_path_match_tz",
        "jsonb_path_query",
        "jsonb_path_query_array",
        "jsonb_path_query_array_tz",
        "jsonb_path_query_first",
        "jsonb_path_query_first_tz",
        "jsonb_path_query_tz",
        "jsonb_populate_record",
        "jsonb_populate_recordset",
        "jsonb_pretty",
        "jsonb_set",
        "jsonb_set_lax",
        "jsonb_strip_nulls",
        "jsonb_to_record",
        "jsonb_to_recordset",
        "jsonb_to_tsvector",
        "jsonb_typeof",
        "justify_days",
        "justify_hours",
        "justify_interval",
        "lag",
        "last_value",
        "lcm",
        "lead",
        "left",
        "length",
        "like_escape",
        "line",
        "ln",
        "log",
        "log10",
        "lower",
        "lower_inc",
        "lower_inf",
        "lpad",
        "lseg",
        "ltrim",
        "macaddr",
        "macaddr8",
        "macaddr8_set7bit",
        "make_date",
        "make_interval",
        "make_time",
        "make_timestamp",
        "make_timestamptz",
        "makeaclitem",
        "masklen",
        "max",
        "md5",
        "min",
        "min_scale",
        "mod",
        "mode",
        "money",
        "multirange",
        "mxid_age",
        "name",
        "netmask",
        "network",
        "normalize",
        "now",
        "npoints",
        "nth_value",
        "ntile",
        "num_nonnulls",
        "num_nulls",
        "numeric",
        "numeric_div_trunc",
        "numeric_exp",
        "numeric_ln",
        "numeric_sqrt",
        "nummultirange",
        "numnode",
        "numrange",
        "numrange_subdiff",
        "obj_description",
        "octet_length",
        "oid",
        "oidvectortypes",
        "overlaps",
        "overlay",
        "parse_ident",
        "path",
        "pclose",
        "percent_rank",
        "percentile_cont",
        "percentile_disc",
        "pg_available_extension_versions",
        "pg_available_extensions",
        "pg_backend_pid",
        "pg_char_to_encoding",
        "pg_client_encoding",
        "pg_collation_for",
        "pg_collation_is_visible",
        "pg_column_compression",
        "pg_column_is_updatable",
        "pg_column_size",
        "pg_conf_load_time",
        "pg_conversion_is_visible",
        "pg_current_snapshot",
        "pg_database_size",
        "pg_describe_object",
        "pg_encoding_max_length",
        "pg_encoding_to_char",
        "pg_extension_update_paths",
        "pg_function_is_visible",
        "pg_get_catalog_foreign_keys",
        "pg_get_constraintdef",
        "pg_get_expr",
        "pg_get_function_arg_default",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
        "pg_get_function_result",
        "pg_get_function_sqlbody",
        "pg_get_functiondef",
        "pg_get_indexdef",
        "pg_get_keywords",
        "pg_get_object_address",
        "pg_get_partition_constraintdef",
        "pg_get_partkeydef",
        "pg_get_replica_identity_index",
        "pg_get_ruledef",
        "pg_get_serial_sequence",
        "pg_get_statisticsobjdef",
        "pg_get_statisticsobjdef_columns",
        "pg_get_statisticsobjdef_expressions",
        "pg_get_triggerdef",
        "pg_get_userbyid",
        "pg_get_viewdef",
        "pg_has_role",
        "pg_identify_object",
        "pg_identify_object_as_address",
        "pg_index_column_has_property",
        "pg_index_has_property",
        "pg_indexam_has_property",
        "pg_indexam_progress_phasename",
        "pg_indexes_size",
        "pg_is_in_recovery",
        "pg_is_other_temp_schema",
        "pg_jit_available",
        "pg_lsn",
        "pg_my_temp_schema",
        "pg_opclass_is_visible",
        "pg_operator_is_visible",
        "pg_opfamily_is_visible",
        "pg_options_to_table",
        "pg_partition_ancestors",
        "pg_partition_root",
        "pg_partition_tree",
        "pg_postmaster_start_time",
        "pg_relation_is_publishable",
        "pg_relation_is_updatable",
        "pg_relation_size",
        "pg_sequence_parameters",
        "pg_size_bytes",
        "pg_size_pretty",
        "pg_snapshot_xip",
        "pg_snapshot_xmax",
        "pg_snapshot_xmin",
        "pg_statistics_obj_is_visible",
        "pg_table_is_visible",
        "pg_table_size",
        "pg_tablespace_size",
        "pg_timezone_abbrevs",
        "pg_timezone_names",
        "pg_total_relation_size",
        "pg_trigger_depth",
        "pg_ts_config_is_visible",
        "pg_ts_dict_is_visible",
        "pg_ts_parser_is_visible",
        "pg_ts_template_is_visible",
        "pg_type_is_visible",
        "pg_typeof",
        "pg_visible_in_snapshot",
        "pg_wal_lsn_diff",
        "pg_walfile_name",
        "pg_walfile_name_offset",
        "phraseto_tsquery",
        "pi",
        "plainto_tsquery",
        "point",
        "polygon",
        "popen",
        "pow",
        "power",
        "querytree",
        "quote_ident",
        "quote_literal",
        "quote_nullable",
        "radians",
        "radius",
        "random",
        "range_agg",
        "range_intersect_agg",
        "range_merge",
        "rank",
        "regclass",
        "regexp_count",
        "regexp_instr",
        "regexp_like",
        "regexp_match",
        "regexp_matches",
        "regexp_replace",
        "regexp_split_to_array",
        "regexp_split_to_table",
        "regexp_substr",
        "regr_avgx",
        "regr_avgy",
        "regr_count",
        "regr_intercept",
        "regr_r2",
        "regr_slope",
        "regr_sxx",
        "regr_sxy",
        "regr_syy",
        "repeat",
        "reverse",
        "right",
        "round",
        "rpad",
        "row_number",
        "row_security_active",
        "row_to_json",
        "rtrim",
        "scale",
        "session_user",
        "set_bit",
        "set_byte",
        "set_masklen",
        "setweight",
        "sha224",
        "sha256",
        "sha384",
        "sha512",
        "shobj_description",
        "sign",
        "similar_escape",
        "similar_to_escape",
        "sin",
        "sind",
        "sinh",
        "slope",
        "sqrt",
        "starts_with",
        "statement_timestamp",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "string_agg",
        "strip",
        "substr",
        "substring",
        "sum",
        "tan",
        "tand",
        "tanh",
        "text",
        "textlen",
        "time",
        "timeofday",
        "timestamp",
        "timestamptz",
        "timetz",
        "timezone",
        "to_ascii",
        "to_char",
        "to_date",
        "to_hex",
        "to_json",
        "to_jsonb",
        "to_number",
        "to_regclass",
        "to_regcollation",
        "to_regnamespace",
        "to_regoper",
        "to_regoperator",
        "to_regproc",
        "to_regprocedure",
        "to_regrole",
        "to_regtype",
        "to_timestamp",
        "to_tsquery",
        "to_tsvector",
        "transaction_timestamp",
        "trim_array",
        "trim_scale",
        "trunc",
        "ts_debug",
        "ts_delete",
        "ts_filter",
        "ts_headline",
        "ts_lexize",
        "ts_parse",
        "ts_rank_cd",
        "ts_token_type",
        "tsmultirange",
        "tsquery_phrase",
        "tsrange",
        "tsrange_subdiff",
        "tstzmultirange",
        "tstzrange",
        "tstzrange_subdiff",
        "tsvector_to_array",
        "txid_current_snapshot",
        "txid_snapshot_xip",
        "txid_snapshot_xmax",
        "txid_snapshot_xmin",
        "txid_visible_in_snapshot",
        "unistr",
        "unnest",
        "upper",
        "upper_inc",
        "upper_inf",
        "var_pop",
        "var_samp",
        "varbit",
        "varchar",
        "variance",
        "version",
        "websearch_to_tsquery",
        "width",
        "width_bucket",
        "xid",
    }
)

# What PostgreSQL 16, 17 and 18 added to the documented functions of pg_catalog that are
# free of side effects (the candidates of `scripts/sql-function-candidates.sql` on each major,
# compared with the one before, reviewed as `BUILTIN_FUNCTIONS` was). Every other new name is
# denied below or is a monitoring internal (`pg_stat_get_*`).
ADDED_FUNCTIONS: Final = MappingProxyType(
    {
        16: frozenset(
            {
                "any_value",
                "array_sample",
                "array_shuffle",
                "date_add",
                "date_subtract",
                "erf",
                "erfc",
                "json_agg_strict",
                "json_object_agg_strict",
                "json_object_agg_unique",
                "json_object_agg_unique_strict",
                "jsonb_agg_strict",
                "jsonb_object_agg_strict",
                "jsonb_object_agg_unique",
                "jsonb_object_agg_unique_strict",
                "random_normal",
            }
        ),
        17: frozenset(
            {
                "icu_unicode_version",
                "jsonb_populate_record_valid",
                "pg_basetype",
                "pg_column_toast_chunk_id",
                "to_bin",
                "to_oct",
                "to_regtypemod",
                "unicode_assigned",
                "unicode_version",
                "uuid_extract_timestamp",
                "uuid_extract_version",
            }
        ),
        18: frozenset(
            {
                "array_reverse",
                "array_sort",
                "bytea",
                "casefold",
                "crc32",
                "crc32c",
                "gamma",
                "has_largeobject_privilege",
                "lgamma",
                "pg_get_acl",
                "pg_timezone_abbrevs_abbrevs",
                "pg_timezone_abbrevs_zone",
                "uuidv4",
                "uuidv7",
            }
        ),
    }
)

# What a major no longer has: PostgreSQL 18 replaced `pg_timezone_abbrevs()` (its view
# remains) with `pg_timezone_abbrevs_zone()` and `pg_timezone_abbrevs_abbrevs()`.
REMOVED_FUNCTIONS: Final = MappingProxyType({18: frozenset({"pg_timezone_abbrevs"})})

# Support functions no query names, which PostgreSQL calls for syntax a query may use: a
# window frame's `RANGE <offset> PRECEDING` (`in_range`) and `TABLESAMPLE SYSTEM` and
# `BERNOULLI` (their handlers).
SUPPORT_FUNCTIONS: Final = frozenset({"bernoulli", "in_range", "system"})


def callable_functions(major: int) -> frozenset[str]:
    """Return the reviewed built-ins a query may call on one PostgreSQL major.

    Args:
        major: The server's major version (15 for 15.4); older ones get 15's list.

    Returns:
        The names.
    """
    names = set(BUILTIN_FUNCTIONS)
    for since, added in ADDED_FUNCTIONS.items():
        if major >= since:
            names |= added
    for since, removed in REMOVED_FUNCTIONS.items():
        if major >= since:
            names -= removed
    return frozenset(names)


def first_major_with(name: str) -> int | None:
    """Return the first major whose reviewed list holds `name`, or None.

    Args:
        name: A function's name.
    """
    if name in BUILTIN_FUNCTIONS:
        return OLDEST_MAJOR
    for since in sorted(ADDED_FUNCTIONS):
        if name in ADDED_FUNCTIONS[since]:
            return since
    return None


# Work the statement timeout cannot stop, whose time grows faster than its input: each
# was found by the review of every reachable function (`tests/vectors/sql_interrupts.toml`,
# by C symbol: the source read, and `scripts/measure-sql-interrupts.py` run) and measured
# to run past the statement timeout without noticing it (`tests/unit/test_sql_interrupts.py`
# shows it again on every run), and what it does can be written another way that the
# timeout does stop. A name refuses every overload and every operator whose function has
# it. The reason is what the caller is told.
_UNSTOPPABLE: Final = "the statement timeout cannot stop it"
UNINTERRUPTIBLE: Final = MappingProxyType(
    {
        # libxml2 evaluates XPath without ever checking for interrupts; a 4 KB document and
        # expression ran 11 s under a 5 s timeout, and cost grows as n^3 and beyond.
        "xpath": _UNSTOPPABLE + " (libxml2 never checks for cancellation)",
        "xpath_exists": _UNSTOPPABLE + " (libxml2 never checks for cancellation)",
        # PostgreSQL's substring search (text_position) checks for interrupts only between
        # matches; one search for a needle of m bytes in n bytes costs up to n * m steps
        # (5 MB and 2 KB ran 30 s under a 1 s timeout).
        "strpos": _UNSTOPPABLE + " (a long search never checks for cancellation); use ~ "
        "or regexp_instr()",
        "position": _UNSTOPPABLE + " (a long search never checks for cancellation); use ~ "
        "or regexp_instr()",
        "replace": _UNSTOPPABLE + " (a long search never checks for cancellation); use "
        "regexp_replace()",
        "split_part": _UNSTOPPABLE + " (a long search never checks for cancellation); use "
        "regexp_split_to_array()",
        "string_to_array": _UNSTOPPABLE + " (a long search never checks for cancellation); "
        "use regexp_split_to_array()",
        "string_to_table": _UNSTOPPABLE + " (a long search never checks for cancellation); "
        "use regexp_split_to_table()",
        # Array containment and overlap compare every element of one array with every
        # element of the other, without checking for interrupts (30,000 elements each ran
        # 13 s and 23 s under a 0.3 s timeout). Their operators (@>, <@, &&) are refused too.
        "arraycontains": _UNSTOPPABLE + " (it compares every pair of elements); compare "
        "unnested elements instead",
        "arraycontained": _UNSTOPPABLE + " (it compares every pair of elements); compare "
        "unnested elements instead",
        "arrayoverlap": _UNSTOPPABLE + " (it compares every pair of elements); compare "
        "unnested elements instead",
        # jsonb containment (@>, <@) matches every element of one array against every
        # element of the other without checking for interrupts (30,000 elements each ran
        # 52 s under a 0.2 s timeout on PostgreSQL 18).
        "jsonb_contains": _UNSTOPPABLE + " (it compares every pair of elements); use -> "
        "or jsonb_path_exists()",
        "jsonb_contained": _UNSTOPPABLE + " (it compares every pair of elements); use -> "
        "or jsonb_path_exists()",
        # translate scans the set of characters for every character of the string, without
        # checking for interrupts (20 MB against a 5,000-character set ran over 13 minutes
        # under a 0.2 s timeout on PostgreSQL 15).
        "translate": _UNSTOPPABLE + " (it scans the set for every character); use regexp_replace()",
        # array_position(s) compare the value sought with every element without checking
        # for interrupts, and a value read from a table is fetched again for each element
        # (a 65 KB numeric against a million elements ran past 5 s under a 0.2 s timeout).
        "array_position": _UNSTOPPABLE + " (it fetches the value again for every element); "
        "use unnest() WITH ORDINALITY",
        "array_positions": _UNSTOPPABLE + " (it fetches the value again for every element); "
        "use unnest() WITH ORDINALITY",
        # ?| and ?& look each key up in the document, and a jsonb array is scanned from its
        # start for every key, without checking for interrupts (a million elements against
        # 4,096 keys ran past 5 s under a 0.2 s timeout). Their operators are refused too.
        "jsonb_exists_any": _UNSTOPPABLE + " (it scans the document for every key); use ? "
        "with OR, or jsonb_path_exists()",
        "jsonb_exists_all": _UNSTOPPABLE + " (it scans the document for every key); use ? "
        "with AND, or jsonb_path_exists()",
        # jsonb - text[] (and its function, which shares the name of - text and - integer)
        # compares every key of the document with every key to delete, without checking
        # for interrupts. Its operators are refused too.
        "jsonb_delete": _UNSTOPPABLE + " (with an array it compares every pair of keys); "
        "use jsonb_path_query() or rebuild the object from jsonb_each()",
        # The geometric operators between two paths or polygons test every edge of one
        # against every edge of the other without checking for interrupts (a million points
        # against 4,096 ran past 5 s under a 0.2 s timeout): ?#, <->, && and ~= on them.
        "path_inter": _UNSTOPPABLE + " (it tests every pair of edges)",
        "path_distance": _UNSTOPPABLE + " (it tests every pair of edges)",
        "poly_distance": _UNSTOPPABLE + " (it tests every pair of edges)",
        "poly_overlap": _UNSTOPPABLE + " (it tests every pair of edges)",
        "poly_same": _UNSTOPPABLE + " (it compares the points from every starting point)",
        # ts_rank relates every pair of query terms through every pair of their positions,
        # without checking for interrupts (2,000 words of 256 positions against 1,024 terms
        # ran past 5 s under a 0.2 s timeout); ts_rank_cd checks.
        "ts_rank": _UNSTOPPABLE + " (it relates every pair of terms and positions); use "
        "ts_rank_cd()",
        # LIKE and ILIKE (and their functions for text, char, name and bytea) try the literal
        # after a % at every position of the text without checking for interrupts: n * m
        # steps (2 MB against a 1,000-character literal took 4.8 s, 1 MB against 2,000 took
        # 4.2 s; 16 MB against 16 KB ran past 5 s under a 0.2 s timeout, on PostgreSQL 15;
        # 18 checks only with a nondeterministic collation). Their operators are refused too.
        **dict.fromkeys(
            (
                "like",
                "notlike",
                "textlike",
                "textnlike",
                "texticlike",
                "texticnlike",
                "bpcharlike",
                "bpcharnlike",
                "bpchariclike",
                "bpcharicnlike",
                "namelike",
                "namenlike",
                "nameiclike",
                "nameicnlike",
                "bytealike",
                "byteanlike",
            ),
            _UNSTOPPABLE + " (it tries the pattern at every position of the text); use ~ or "
            "~* (regular expressions, which the timeout stops), or starts_with()",
        ),
        # numeric_log is log(b, x) by its own name (UNINTERRUPTIBLE_OVERLOADS, "log").
        "numeric_log": _UNSTOPPABLE + " with a base near 1 (its precision grows with the "
        "base's digits); use ln(x) / ln(b)",
    }
)

# Overloads refused by their number of arguments, with the reason: trimming a set of
# characters scans the set for every character trimmed, without checking for interrupts
# (a 3,000-character set over 3 MB ran 166 s under a 0.3 s timeout); trimming spaces (one
# argument) is linear and allowed. log(b, x) with a base b near 1 computes to a precision
# that grows with the base's digits, without checking for interrupts (a base of 16,383
# digits ran past 5 s under a 0.2 s timeout); log(x) takes base 10 and is allowed.
_TRIM_SET: Final = (
    2,
    _UNSTOPPABLE + " with a set of characters (it scans the set for every character); "
    "trim spaces with one argument, or use regexp_replace()",
)
UNINTERRUPTIBLE_OVERLOADS: Final = MappingProxyType(
    {
        "btrim": _TRIM_SET,
        "ltrim": _TRIM_SET,
        "rtrim": _TRIM_SET,
        "log": (
            2,
            _UNSTOPPABLE + " with a base (its precision grows with the base's digits); use "
            "ln(x) / ln(b)",
        ),
    }
)

_RUNS_SQL_TEXT: Final = "it runs SQL given as a string, which the policy cannot check"
_TAKES_XID: Final = "it takes a transaction id even in a read-only transaction"
_FILES: Final = "it reads the server's file system"
_SIGNALS: Final = "it signals or controls server processes"
_WAL: Final = "it writes WAL or controls replication, outside the transaction"
_LOCKS: Final = "advisory locks outlive the rolled-back transaction"
_SEQUENCES: Final = "sequence state changes are not undone by a rollback"
_LARGE_OBJECTS: Final = "large-object functions read and write server files and objects"
_XML: Final = "XML parsing of caller documents is refused"
_INDEX_WRITE: Final = "it writes to an index"

# Functions refused by name, with the reason the caller is told. Each acts outside the
# rolled-back read-only transaction, or defeats another control.
DENIED_FUNCTIONS: Final = MappingProxyType(
    {
        "brin_desummarize_range": _INDEX_WRITE,
        "brin_summarize_new_values": _INDEX_WRITE,
        "brin_summarize_range": _INDEX_WRITE,
        "currval": _SEQUENCES,
        "cursor_to_xml": _RUNS_SQL_TEXT,
        "cursor_to_xmlschema": _RUNS_SQL_TEXT,
        "database_to_xml": _RUNS_SQL_TEXT,
        "database_to_xml_and_xmlschema": _RUNS_SQL_TEXT,
        "database_to_xmlschema": _RUNS_SQL_TEXT,
        "gin_clean_pending_list": _INDEX_WRITE,
        "lastval": _SEQUENCES,
        "loread": _LARGE_OBJECTS,
        "lowrite": _LARGE_OBJECTS,
        "nextval": _SEQUENCES,
        "pg_cancel_backend": _SIGNALS,
        "pg_create_restore_point": _WAL,
        "pg_current_logfile": _FILES,
        "pg_current_xact_id": _TAKES_XID,
        "pg_current_xact_id_if_assigned": _TAKES_XID,
        "pg_export_snapshot": "it exports a snapshot to other sessions",
        "pg_input_error_info": "it runs the input function of a type named in a string",
        "pg_input_is_valid": "it runs the input function of a type named in a string",
        "pg_get_sequence_data": _SEQUENCES,
        "pg_restore_attribute_stats": "it writes planner statistics",
        "pg_restore_relation_stats": "it writes planner statistics",
        "pg_clear_attribute_stats": "it writes planner statistics",
        "pg_clear_relation_stats": "it writes planner statistics",
        "pg_sync_replication_slots": _WAL,
        "pg_import_system_collations": "it creates collations",
        "pg_log_backend_memory_contexts": _SIGNALS,
        "pg_notify": "notifications reach other sessions",
        "pg_promote": _SIGNALS,
        "pg_reload_conf": _SIGNALS,
        "pg_rotate_logfile": _SIGNALS,
        "pg_stat_file": _FILES,
        "pg_switch_wal": _WAL,
        "pg_terminate_backend": _SIGNALS,
        "pg_wal_replay_pause": _WAL,
        "pg_wal_replay_resume": _WAL,
        "query_to_xml": _RUNS_SQL_TEXT,
        "query_to_xml_and_xmlschema": _RUNS_SQL_TEXT,
        "query_to_xmlschema": _RUNS_SQL_TEXT,
        "schema_to_xml": _RUNS_SQL_TEXT,
        "schema_to_xml_and_xmlschema": _RUNS_SQL_TEXT,
        "schema_to_xmlschema": _RUNS_SQL_TEXT,
        "set_config": "it changes session settings",
        "setseed": "it changes the session's random seed",
        "setval": _SEQUENCES,
        "table_to_xml": _RUNS_SQL_TEXT,
        "table_to_xml_and_xmlschema": _RUNS_SQL_TEXT,
        "table_to_xmlschema": _RUNS_SQL_TEXT,
        "ts_rewrite": _RUNS_SQL_TEXT,
        "ts_stat": _RUNS_SQL_TEXT,
        "txid_current": _TAKES_XID,
        "txid_current_if_assigned": _TAKES_XID,
    }
)

# Families refused by prefix, with the reason the caller is told. A prefix also catches the
# members a later PostgreSQL adds (pg_sleep_for and pg_sleep_until came after pg_sleep).
DENIED_FUNCTION_PREFIXES: Final = MappingProxyType(
    {
        "binary_upgrade_": "it is for pg_upgrade only",
        "dblink": "it opens its own connection, which can write and outlives the transaction",
        "lo_": _LARGE_OBJECTS,
        "pg_advisory": _LOCKS,
        "pg_backup_": _WAL,
        "pg_copy_": _WAL,
        "pg_create_": _WAL,
        "pg_drop_replication": _WAL,
        "pg_logical_": _WAL,
        "pg_ls_": _FILES,
        "pg_read_": _FILES,
        "pg_replication_": _WAL,
        "pg_sleep": "it holds the connection for as long as it is told",
        "pg_stat_reset": "it resets server statistics",
        "pg_try_advisory": _LOCKS,
        "xml": _XML,
    }
)

# Built-ins executable by PUBLIC out of the box whose effects survive the read-only,
# rolled-back transaction and the session reset (checked on PostgreSQL 15: each ran in
# `BEGIN READ ONLY` as a least-privilege role). The policy refuses them by name; a view, a
# row-level-security policy or a domain CHECK can still call them, so the role audit
# (`role_audit.py`) refuses to serve while the role may execute one that a stored expression
# calls. Large objects, sequences, NOTIFY and settings are absent: the read-only transaction
# refuses them or the rollback undoes them.
ESCAPING_FUNCTIONS: Final = MappingProxyType(
    {
        "pg_current_xact_id": _TAKES_XID,
        "txid_current": _TAKES_XID,
        "pg_logical_emit_message": _WAL,
        "pg_terminate_backend": _SIGNALS,
        "pg_cancel_backend": _SIGNALS,
        "pg_advisory_lock": _LOCKS,
        "pg_advisory_lock_shared": _LOCKS,
        "pg_try_advisory_lock": _LOCKS,
        "pg_try_advisory_lock_shared": _LOCKS,
    }
)


# The functions of pg_catalog that are neither allowed, denied above, support code no query
# names (type input and output, index, aggregate and planner support, triggers, functions
# of `internal` arguments) nor monitoring internals (`pg_stat_get_*`): each left off the
# allowlist on purpose, with the reason. The operator may still allow one by name
# (`MCP_SQL_ALLOWED_FUNCTIONS`); `tests/unit/test_sql_catalog_lists.py` holds that every
# function of the running server's pg_catalog is accounted for.
_VIEW_INTERNAL: Final = "it implements a system view, which is the supported interface"
_SESSION_STATE: Final = "it reports the state of sessions and of the pooled session itself"
_SERVER_LAYOUT: Final = "it reveals the server's files, WAL or control data"
_ONLY_IN_CONTEXT: Final = "it works only inside a validator, an event trigger or initdb"
_INTERNAL: Final = "it is an internal routine of the server, deprecated or undocumented"
UNLISTED_FUNCTIONS: Final = MappingProxyType(
    {
        **dict.fromkeys(
            (
                "pg_get_aios",
                "pg_get_backend_memory_contexts",
                "pg_get_loaded_modules",
                "pg_get_publication_tables",
                "pg_get_replication_slots",
                "pg_get_shmem_allocations",
                "pg_get_shmem_allocations_numa",
                "pg_get_wait_events",
                "pg_get_wal_resource_managers",
                "pg_hba_file_rules",
                "pg_ident_file_mappings",
                "pg_lock_status",
                "pg_mcv_list_items",
                "pg_numa_available",
                "pg_prepared_xact",
                "pg_settings_get_flags",
                "pg_show_all_file_settings",
                "pg_show_all_settings",
                "pg_show_replication_origin_status",
                "pg_stat_clear_snapshot",
                "pg_stat_force_next_flush",
                "pg_stat_have_stats",
            ),
            _VIEW_INTERNAL,
        ),
        **dict.fromkeys(
            (
                "current_query",
                "pg_blocking_pids",
                "pg_cursor",
                "pg_isolation_test_session_is_blocked",
                "pg_listening_channels",
                "pg_notification_queue_usage",
                "pg_prepared_statement",
                "pg_safe_snapshot_blocking_pids",
            ),
            _SESSION_STATE,
        ),
        **dict.fromkeys(
            (
                "inet_server_addr",
                "inet_server_port",
                "pg_available_wal_summaries",
                "pg_collation_actual_version",
                "pg_config",
                "pg_control_checkpoint",
                "pg_control_init",
                "pg_control_recovery",
                "pg_control_system",
                "pg_current_wal_flush_lsn",
                "pg_current_wal_insert_lsn",
                "pg_current_wal_lsn",
                "pg_database_collation_actual_version",
                "pg_filenode_relation",
                "pg_get_multixact_members",
                "pg_get_wal_replay_pause_state",
                "pg_get_wal_summarizer_state",
                "pg_is_wal_replay_paused",
                "pg_last_committed_xact",
                "pg_last_wal_receive_lsn",
                "pg_last_wal_replay_lsn",
                "pg_last_xact_replay_timestamp",
                "pg_log_standby_snapshot",
                "pg_nextoid",
                "pg_relation_filenode",
                "pg_relation_filepath",
                "pg_sequence_last_value",
                "pg_split_walfile_name",
                "pg_tablespace_databases",
                "pg_tablespace_location",
                "pg_wal_summary_contents",
                "pg_xact_commit_timestamp",
                "pg_xact_commit_timestamp_origin",
                "pg_xact_status",
                "txid_status",
            ),
            _SERVER_LAYOUT,
        ),
        **dict.fromkeys(
            (
                "amvalidate",
                "fmgr_c_validator",
                "fmgr_internal_validator",
                "fmgr_sql_validator",
                "pg_event_trigger_ddl_commands",
                "pg_event_trigger_dropped_objects",
                "pg_event_trigger_table_rewrite_oid",
                "pg_event_trigger_table_rewrite_reason",
                "pg_extension_config_dump",
                "pg_stop_making_pinned_objects",
                "plpgsql_validator",
                "postgresql_fdw_validator",
            ),
            _ONLY_IN_CONTEXT,
        ),
        **dict.fromkeys(
            (
                "currtid2",
                "getpgusername",
                "int4inc",
                "int8_sum",
                "nameconcatoid",
                "numeric_inc",
                "pg_rotate_logfile_old",
                "satisfies_hash_partition",
                "shell_in",
                "shell_out",
            ),
            _INTERNAL,
        ),
        # policy.py, Rule 6: PostgreSQL 15 reads SYSTEM_USER as a column.
        "system_user": "PostgreSQL 15 and older read SYSTEM_USER as a column name",
    }
)


# The names the policy (`policy.py`) accepts: those of every supported major. The second
# layer holds a query to the connected server's own list.
ALL_BUILTIN_FUNCTIONS: Final = BUILTIN_FUNCTIONS.union(*ADDED_FUNCTIONS.values())


def denial_reason(name: str) -> str | None:
    """Return why a function is refused by name, or None when no entry denies it.

    Args:
        name: The function's name without its schema, as PostgreSQL compares it.

    Returns:
        The reason, a clause that follows "function x() is not allowed: ".
    """
    reason = DENIED_FUNCTIONS.get(name) or UNINTERRUPTIBLE.get(name)
    if reason is not None:
        return reason
    for prefix, prefix_reason in DENIED_FUNCTION_PREFIXES.items():
        if name.startswith(prefix):
            return prefix_reason
    return None
