"""BM25 over the chunks and notes of a scope, computed in PostgreSQL in one query.

The collection is every chunk and note in scope. Documents are read through the posting lists
ingestion keeps per file (`PostingList`: for one lexeme, the chunks of one file that hold it,
with term frequencies and lengths) and the per-file counts (`NoteAttachment.chunk_count`,
`token_total`). A query therefore touches one row per (query lexeme, file in scope) — located
by the primary key (lexeme, attachment) — instead of every candidate chunk's tsvector: N,
avgdl and each lexeme's document frequency are sums over those rows, and the scores come from
the postings. Notes, few per user and edited often, are read from their own tsvectors (GIN).

IDF is ln(1 + (N − df + 0.5) / (df + 0.5)) within the scope, per text search configuration (an
English `cherri` and a `simple` `cherry` are different lexemes); k1 = 1.2, b = 0.75.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction

K1 = 1.2
B = 0.75
# The aggregation holds one entry per candidate passage (tens of thousands on a large
# library); with the default 4 MB Postgres sorts them on disk instead of hashing in memory.
WORK_MEM = "64MB"

_BM25_SQL = """
WITH scope AS MATERIALIZED ({scope}),
note_scope AS MATERIALIZED ({note_scope}),
stats AS MATERIALIZED (  -- N and average length over every chunk and note in scope
    SELECT d.n + nt.n AS n, (d.total + nt.total)::float8 / greatest(d.n + nt.n, 1) AS avgdl
    FROM (
        SELECT coalesce(sum(a.chunk_count), 0) AS n, coalesce(sum(a.token_total), 0) AS total
        FROM attachments_noteattachment a WHERE a.id IN (SELECT id FROM scope)
    ) d, (
        SELECT count(*) AS n, coalesce(sum(n.token_len), 0) AS total
        FROM notes_note n WHERE n.id IN (SELECT id FROM note_scope) AND n.token_len > 0
    ) nt
),
configs AS (SELECT search_config AS cfg FROM scope UNION SELECT search_config FROM note_scope),
terms AS MATERIALIZED (  -- the query's lexemes in each configuration present in the scope
    SELECT DISTINCT cfg, unnest(tsvector_to_array(to_tsvector(
        cfg::regconfig, CASE WHEN cfg = 'simple' THEN unaccent(%s) ELSE %s END
    ))) AS lexeme
    FROM configs
),
files AS (SELECT search_config AS cfg, array_agg(id ORDER BY id) AS ids FROM scope GROUP BY 1),
lists AS MATERIALIZED (  -- each term's posting list in each file in scope of its configuration:
    -- one walk along the term's index entries per term, matching the files' sorted ids
    SELECT t.cfg, t.lexeme, p.df, p.chunk_ids, p.tfs, p.lens
    FROM terms t
    JOIN files f ON f.cfg = t.cfg
    JOIN attachments_postinglist p ON p.lexeme = t.lexeme AND p.attachment_id = ANY(f.ids)
),
note_postings AS MATERIALIZED (
    SELECT ns.search_config AS cfg, u.lexeme, n.id, coalesce(array_length(u.positions, 1), 1) AS tf,
           n.token_len AS len
    FROM (SELECT cfg, array_agg(lexeme) AS lexemes,
                 array_to_string(array_agg(quote_literal(lexeme)), ' | ')::tsquery AS tsq
          FROM terms GROUP BY cfg) q
    JOIN note_scope ns ON ns.search_config = q.cfg
    JOIN notes_note n ON n.id = ns.id AND n.search_vector @@ q.tsq,
    unnest(ts_filter(setweight(n.search_vector, 'A', q.lexemes), '{{a}}')) AS u
    WHERE u.lexeme = ANY(q.lexemes)
),
idf AS (
    SELECT cfg, lexeme, ln(1 + (st.n - sum(df) + 0.5) / (sum(df) + 0.5)) AS idf
    FROM (
        SELECT cfg, lexeme, df FROM lists
        UNION ALL SELECT cfg, lexeme, 1 FROM note_postings
    ) f CROSS JOIN stats st
    GROUP BY cfg, lexeme, st.n
),
postings AS (
    SELECT 'document' AS kind, p.id, i.idf, p.tf, p.len
    FROM lists l JOIN idf i USING (cfg, lexeme),
         unnest(l.chunk_ids, l.tfs, l.lens) AS p(id, tf, len)
    UNION ALL
    SELECT 'note', np.id, i.idf, np.tf, np.len FROM note_postings np JOIN idf i USING (cfg, lexeme)
)
SELECT p.kind, p.id,
       sum(p.idf * p.tf * ({k1} + 1)
           / (p.tf + {k1} * (1 - {b} + {b} * p.len / greatest(st.avgdl, 1)))) AS score
FROM postings p CROSS JOIN stats st
GROUP BY p.kind, p.id
ORDER BY score DESC, p.kind, p.id
LIMIT %s
"""


def rank(
    *,
    text: str,
    scope: tuple[str, tuple[Any, ...]],
    note_scope: tuple[str, tuple[Any, ...]],
    limit: int,
) -> list[tuple[tuple[str, int], float]]:
    """((kind, id), score), best first: the BM25 top `limit` of `text`'s lexemes over the
    passages that the SQL of `scope` (attachment id, search_config) and `note_scope` (note id,
    search_config) select."""
    if limit <= 0:
        return []
    scope_sql, scope_params = scope
    note_sql, note_params = note_scope
    sql = _BM25_SQL.format(scope=scope_sql, note_scope=note_sql, k1=float(K1), b=float(B))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL work_mem = '{WORK_MEM}'")
        cursor.execute(sql, [*scope_params, *note_params, text, text, limit])
        return [((kind, int(pk)), float(score)) for kind, pk, score in cursor.fetchall()]
