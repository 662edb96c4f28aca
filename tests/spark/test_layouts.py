"""Where each store keeps its timeouts, per dialect, as the stores' own creation scripts name them."""

from __future__ import annotations

import json

import pytest

from nsb_delays.pipeline.layouts import (
    LayoutError,
    dialect_of_jdbc_url,
    jdbc_layout,
    msmq_store_layout,
    nhibernate_layout,
    sql_persistence_layout,
    table_prefix,
)
from nsb_delays.pipeline.sources import msmq_headers_as_json


def test_sql_persistence_prefix_is_the_endpoint_with_dots_as_underscores() -> None:
    assert table_prefix("Sales.Orders") == "Sales_Orders_"


@pytest.mark.parametrize(
    ("dialect", "table", "due", "ident"),
    [
        ("postgresql", '"public"."Sales_Orders_TimeoutData"', '"Time"', '"Id"'),
        ("mssql", "[dbo].[Sales_Orders_TimeoutData]", "[Time]", "[Id]"),
        ("mysql", "`Sales_Orders_TimeoutData`", "`Time`", "`Id`"),
        ("oracle", '"SALES_ORDERS_TO"', '"EXPIRETIME"', '"ID"'),  # UPPER(prefix) || 'TO', column ExpireTime
    ],
)
def test_sql_persistence_layout_per_dialect(dialect: str, table: str, due: str, ident: str) -> None:
    layout = sql_persistence_layout("Sales.Orders", dialect)
    assert (layout.table, layout.column("due"), layout.column("id")) == (table, due, ident)
    assert set(layout.columns) == {"id", "destination", "state", "due", "headers", "saga_id"}
    assert layout.select_canonical() == (
        f"select {ident} as id, {layout.column('destination')} as destination, {layout.column('state')} as state, "
        f"{due} as due, {layout.column('headers')} as headers, {layout.column('saga_id')} as saga_id from {table}"
    )


def test_nhibernate_reads_one_endpoint_from_the_shared_timeout_entity_table() -> None:
    layout = nhibernate_layout("Sales", "mssql")
    assert layout.table == "[dbo].[TimeoutEntity]"
    assert layout.select_canonical().endswith("from [dbo].[TimeoutEntity] where [Endpoint] = 'Sales'")
    assert nhibernate_layout("O'Brien", "postgresql").where() == " where \"Endpoint\" = 'O''Brien'"
    with pytest.raises(LayoutError, match="--endpoint is required"):
        nhibernate_layout("", "mssql")


def test_msmq_store_is_the_endpoint_dot_timeouts_table_with_xml_headers() -> None:
    layout = msmq_store_layout("Sales")
    assert (layout.table, layout.headers_format) == ("[dbo].[Sales.timeouts]", "msmq-xml")
    with pytest.raises(LayoutError, match="SQL Server"):
        jdbc_layout("msmq", "postgresql", "Sales")


def test_jdbc_url_names_the_dialect_and_unknown_ones_are_refused() -> None:
    assert dialect_of_jdbc_url("jdbc:sqlserver://db:1433;databaseName=nsb") == "mssql"
    assert dialect_of_jdbc_url("jdbc:oracle:thin:@db:1521/nsb") == "oracle"
    with pytest.raises(LayoutError, match="cannot tell the SQL dialect of JDBC URL 'jdbc:db2://x'"):
        dialect_of_jdbc_url("jdbc:db2://x")
    with pytest.raises(LayoutError, match="unknown SQL dialect 'sqlite'"):
        sql_persistence_layout("Sales", "sqlite")


def test_table_override_keeps_the_columns() -> None:
    layout = jdbc_layout("sqlp", "postgresql", "Sales", table='"nsb"."sales_timeoutdata"')
    assert layout.table == '"nsb"."sales_timeoutdata"' and layout.column("due") == '"Time"'


def test_msmq_header_xml_becomes_a_json_object(spark) -> None:
    xml = (
        '<?xml version="1.0"?><ArrayOfHeaderInfo xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
        "<HeaderInfo><Key>NServiceBus.MessageId</Key><Value>abc</Value></HeaderInfo>"
        "<HeaderInfo><Key>NServiceBus.ContentType</Key><Value>text/xml</Value></HeaderInfo></ArrayOfHeaderInfo>"
    )
    frame = spark.createDataFrame([(bytearray(xml.encode()),)], "headers binary")
    (row,) = frame.select(msmq_headers_as_json(frame["headers"]).alias("json")).collect()
    assert json.loads(row["json"]) == {"NServiceBus.MessageId": "abc", "NServiceBus.ContentType": "text/xml"}
