"""App tables (issue 10): each app's own database, its tables' schemas and rows.

``names`` (identifiers), ``catalog`` (reading a schema back), ``limits``; ``databases`` (one
database per app); ``schema_service`` (TableService: create, alter, drop) and
``records_service`` (RecordService: rows and search). docs/tables.md describes the model.
"""
