"""BM25 over the chunks and notes of a scope, computed in PostgreSQL in one query.

The collection is every chunk and note in scope. Documents are read through the posting lists
ingestion keeps per file (`PostingList`: for one lexeme, the chunks of one file that hold it,
with term frequencies and lengths) and the per-file counts (`NoteAttachment.chunk_count`,
`token_total`). A query therefore touches one row per (query lexeme, file in scope) — located
by the primary key (lexeme, attachment) — instead of every candidate chunk's tsvector: N,
avgdl and each lexeme's document frequency are sums over those rows, and the scores come from
the postings. Notes, few per user and edited often, are read from their own tsvectors (GIN).

Postgres finds everything and computes every statistic; numpy does the last, per-posting step.
The query returns, per kind, each list's IDF and length and all postings packed as binary
(`array_send`, concatenated with `string_agg`): one row, decoded with `np.frombuffer`. Summing
the postings in SQL instead (unnest + hash aggregate) costs ~1.5 µs per posting, which on a large
library (tens of thousands of postings per question) was most of a hybrid search's time.

Term frequencies and lengths are BM25F's: a word counts by the field it stands in, the file's
title and the section headings more than the text (core.language.term_count_sql; ingestion
and notes store them so).

IDF is ln(1 + (N − df + 0.5) / (df + 0.5)) within the scope, per text search configuration (an
English `cherri` and a `simple` `cherry` are different lexemes); k1 = 1.2, b = 0.75.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from django.db import connection, transaction

from core.language import term_count_sql

K1 = 1.2
B = 0.75
# The posting lists of a question are held in memory (a few MB on a large library); with the
# default 4 MB Postgres would spill them to a temporary file.
WORK_MEM = "64MB"
# array_send's element layout: a 4-byte length, then the value, big-endian.
_IDS = np.dtype([("length", ">i4"), ("value", ">i8")])
_TFS = np.dtype([("length", ">i4"), ("value", ">i2")])
_LENS = np.dtype([("length", ">i4"), ("value", ">i4")])
# Postings are summed per passage in an array indexed by id when the ids span at most this
# many slots (8 MB at most for 1M ids), else after sorting them.
DENSE_IDS_PER_POSTING = 8
DENSE_IDS_SLACK = 65_536

_BM25_SQL = """
WITH scope AS MATERIALIZED ({scope}),
note_scope AS MATERIALIZED ({note_scope}),
stats AS MATERIALIZED (  -- N and average length over every chunk and note in scope
    SELECT (d.n + nt.n)::float8 AS n,  -- float8, not numeric: numeric arithmetic is slow
           (d.total + nt.total)::float8 / greatest(d.n + nt.n, 1) AS avgdl
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
    SELECT ns.search_config AS cfg, u.lexeme, n.id, {term_count} AS tf,
           n.token_len AS len
    FROM (SELECT cfg, array_agg(lexeme) AS lexemes,
                 array_to_string(array_agg(quote_literal(lexeme)), ' | ')::tsquery AS tsq
          FROM terms GROUP BY cfg) q
    JOIN note_scope ns ON ns.search_config = q.cfg
    JOIN notes_note n ON n.id = ns.id AND n.search_vector @@ q.tsq,
    unnest(n.search_vector) AS u
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
parts AS (  -- one row per posting list: its IDF and its postings
    SELECT 'document' AS kind, i.idf, l.chunk_ids AS ids, l.tfs, l.lens
    FROM lists l JOIN idf i USING (cfg, lexeme)
    UNION ALL
    SELECT 'note', i.idf, array_agg(np.id::int8), array_agg(np.tf::int2), array_agg(np.len::int4)
    FROM note_postings np JOIN idf i USING (cfg, lexeme)
    GROUP BY np.cfg, np.lexeme, i.idf
)
-- Every aggregate of a group sees its rows in the same order, so the i-th IDF and count go
-- with the i-th run of postings in the blobs. substr(…, 21) drops array_send's 1-D header.
SELECT p.kind, st.avgdl, array_agg(p.idf), array_agg(cardinality(p.ids)),
       string_agg(substr(array_send(p.ids), 21), ''::bytea),
       string_agg(substr(array_send(p.tfs), 21), ''::bytea),
       string_agg(substr(array_send(p.lens), 21), ''::bytea)
FROM parts p CROSS JOIN stats st
GROUP BY p.kind, st.avgdl
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
    sql = _BM25_SQL.format(scope=scope_sql, note_scope=note_sql, term_count=term_count_sql("u"))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL work_mem = '{WORK_MEM}'")
        # Results in binary: the packed postings arrive as they are, not as hex text twice their
        # size (~30 % of the query's time on a large library). Django's cursors bind parameters
        # client-side, which psycopg cannot combine with binary results; this one binds them
        # server-side, on the same connection and transaction.
        with psycopg.Cursor(cursor.connection) as binary:
            binary.execute(sql, [*scope_params, *note_params, text, text], binary=True)
            rows = binary.fetchall()
    found: list[tuple[tuple[str, int], float]] = []
    for kind, avgdl, idfs, counts, ids, tfs, lens in rows:
        pks, scores = _scores(avgdl, idfs, counts, ids, tfs, lens)
        if len(scores) > limit:  # only passages scoring at least the limit-th best can rank
            kth = np.partition(scores, len(scores) - limit)[len(scores) - limit]
            pks, scores = pks[scores >= kth], scores[scores >= kth]
        best = np.lexsort((pks, -scores))[:limit]  # score, then id: the order is stable
        found += [((kind, int(pks[i])), float(scores[i])) for i in best]
    found.sort(key=lambda row: (-row[1], row[0]))
    return found[:limit]


def _scores(
    avgdl: float, idfs: list[float], counts: list[int], ids: bytes, tfs: bytes, lens: bytes
) -> tuple[np.ndarray, np.ndarray]:
    """(passage ids, BM25 scores) from one kind's packed posting lists."""
    pk = np.frombuffer(ids, _IDS)["value"].astype(np.int64)
    tf = np.frombuffer(tfs, _TFS)["value"].astype(np.float64)
    length = np.frombuffer(lens, _LENS)["value"].astype(np.float64)
    idf = np.repeat(np.asarray(idfs, dtype=np.float64), counts)
    per_posting = idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / max(avgdl, 1.0)))
    lowest = int(pk.min())
    span = int(pk.max()) - lowest + 1
    if span <= DENSE_IDS_PER_POSTING * len(pk) + DENSE_IDS_SLACK:
        # Ids close together (chunks are numbered as they are saved): sum into a dense array
        # indexed by id, which is several times faster than sorting them. Every posting's score
        # is positive (IDF > 0, tf ≥ 1), so the passages are where the sums are not zero.
        sums = np.bincount(pk - lowest, weights=per_posting, minlength=span)
        passages = np.flatnonzero(sums)
        return passages + lowest, sums[passages]
    passages, which = np.unique(pk, return_inverse=True)
    return passages, np.bincount(which, weights=per_posting)


_DOCUMENTS_SQL = """
WITH scope AS MATERIALIZED ({scope}),
stats AS MATERIALIZED (  -- N documents and their average length in passages
    SELECT count(*)::float8 AS n, coalesce(avg(a.chunk_count), 0)::float8 AS avgdl
    FROM attachments_noteattachment a WHERE a.id IN (SELECT id FROM scope)
),
configs AS (SELECT DISTINCT search_config AS cfg FROM scope),
terms AS MATERIALIZED (
    SELECT DISTINCT cfg, unnest(tsvector_to_array(to_tsvector(
        cfg::regconfig, CASE WHEN cfg = 'simple' THEN unaccent(%s) ELSE %s END
    ))) AS lexeme
    FROM configs
),
files AS (SELECT search_config AS cfg, array_agg(id ORDER BY id) AS ids FROM scope GROUP BY 1),
lists AS MATERIALIZED (  -- one row per (term, file that holds it): the file's passage count
    SELECT t.cfg, t.lexeme, p.attachment_id, p.df
    FROM terms t
    JOIN files f ON f.cfg = t.cfg
    JOIN attachments_postinglist p ON p.lexeme = t.lexeme AND p.attachment_id = ANY(f.ids)
),
idf AS (
    SELECT cfg, lexeme, ln(1 + (st.n - count(*) + 0.5) / (count(*) + 0.5)) AS idf
    FROM lists CROSS JOIN stats st GROUP BY cfg, lexeme, st.n
)
SELECT l.attachment_id, sum(
    i.idf * l.df * {k1_plus_1}
    / (l.df + {k1} * (1 - {b} + {b} * a.chunk_count / greatest(st.avgdl, 1)))
)
FROM lists l JOIN idf i USING (cfg, lexeme)
JOIN attachments_noteattachment a ON a.id = l.attachment_id
CROSS JOIN stats st
GROUP BY l.attachment_id ORDER BY 2 DESC, 1 LIMIT %s
"""


def rank_documents(
    *, text: str, scope: tuple[str, tuple[Any, ...]], limit: int
) -> list[tuple[int, float]]:
    """(attachment id, score), best first: BM25 over whole documents (the first level of a
    two-level search). A document's term frequency is the number of its passages that hold the
    term and its length its number of passages, both read from the posting lists' `df` and the
    per-file counts: one row per (query lexeme, file), no postings. Counting passages rather
    than occurrences keeps a word repeated in one table or index from outweighing a topic the
    document returns to throughout."""
    if limit <= 0:
        return []
    scope_sql, scope_params = scope
    sql = _DOCUMENTS_SQL.format(scope=scope_sql, k1=K1, k1_plus_1=K1 + 1, b=B)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*scope_params, text, text, limit])
        return [(int(pk), float(score)) for pk, score in cursor.fetchall()]
