"""BM25 over the chunks and notes of a scope, computed in PostgreSQL.

The collection is every chunk and note in scope: N and the average length come from the
per-file counts ingestion keeps (NoteAttachment.chunk_count/token_total) plus the notes, and a
lexeme's document frequency is the sum of the files' AttachmentLexeme rows plus the notes that
hold it (their GIN index). Term frequencies come from the candidates' tsvector positions,
lengths from token_len.

Candidates are pruned as in MaxScore (Turtle & Flood, 1995), which keeps the top k exact: a
passage can score at most the sum of its terms' upper bounds (idf × (k1 + 1)). A first pass
scores the passages holding the rarest term; its k-th score θ is a floor for the final k-th.
Terms whose bounds, summed from the smallest, stay below θ cannot lift a passage into the top
k on their own, so only passages holding one of the other ("essential") terms are read and
scored — on a large library common words like "file" no longer make BM25 read tens of
thousands of tsvectors. They still add to the scores of the passages read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db import connection

K1 = 1.2
B = 0.75

_STATISTICS_SQL = """
WITH scope AS MATERIALIZED ({scope}),
note_scope AS MATERIALIZED ({note_scope}),
configs AS (SELECT search_config AS cfg FROM scope UNION SELECT search_config FROM note_scope),
terms AS (  -- the query's lexemes in each text search configuration present in the scope
    SELECT DISTINCT cfg, unnest(tsvector_to_array(to_tsvector(
        cfg::regconfig, CASE WHEN cfg = 'simple' THEN unaccent(%s) ELSE %s END
    ))) AS lexeme
    FROM configs
)
SELECT NULL, NULL, (
    SELECT coalesce(sum(a.chunk_count), 0) FROM attachments_noteattachment a
    WHERE a.id IN (SELECT id FROM scope)
) + (
    SELECT count(*) FROM notes_note n
    WHERE n.id IN (SELECT id FROM note_scope) AND n.token_len > 0
), (
    SELECT coalesce(sum(a.token_total), 0) FROM attachments_noteattachment a
    WHERE a.id IN (SELECT id FROM scope)
) + (
    SELECT coalesce(sum(n.token_len), 0) FROM notes_note n WHERE n.id IN (SELECT id FROM note_scope)
)
UNION ALL
SELECT t.cfg, t.lexeme, coalesce((
    SELECT sum(al.df) FROM attachments_attachmentlexeme al
    JOIN scope s ON s.id = al.attachment_id
    WHERE al.lexeme = t.lexeme AND s.search_config = t.cfg
), 0) + (
    SELECT count(*) FROM note_scope ns JOIN notes_note n ON n.id = ns.id
    WHERE ns.search_config = t.cfg AND n.search_vector @@ quote_literal(t.lexeme)::tsquery
), NULL
FROM terms t
"""

_SCORE_SQL = """
WITH scope AS MATERIALIZED ({scope}),
note_scope AS MATERIALIZED ({note_scope}),
terms AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::float8[], %s::bool[])
          AS t(cfg, lexeme, idf, essential)),
queries AS (  -- per configuration: every query lexeme, and the essential ones as a tsquery
    SELECT cfg, array_agg(lexeme) AS lexemes,
           array_to_string(array_agg(quote_literal(lexeme)) FILTER (WHERE essential),
                           ' | ')::tsquery AS tsq
    FROM terms GROUP BY cfg HAVING bool_or(essential)
),
matches AS (  -- candidates come from the GIN indexes
    SELECT 'document' AS kind, c.id, c.token_len, q.cfg, c.search_vector, q.lexemes
    FROM queries q
    JOIN scope s ON s.search_config = q.cfg
    JOIN attachments_documentchunk c ON c.attachment_id = s.id AND c.search_vector @@ q.tsq
    UNION ALL
    SELECT 'note', n.id, n.token_len, q.cfg, n.search_vector, q.lexemes
    FROM queries q
    JOIN note_scope ns ON ns.search_config = q.cfg
    JOIN notes_note n ON n.id = ns.id AND n.search_vector @@ q.tsq
),
tf AS (
    SELECT m.kind, m.id, m.cfg, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf,
           m.token_len
    -- only the query's lexemes: marked with weight A (passages are indexed unweighted, D)
    -- and filtered in C, instead of unnesting every lexeme of every candidate
    FROM matches m, unnest(ts_filter(setweight(m.search_vector, 'A', m.lexemes), '{{a}}')) AS u
    WHERE u.lexeme = ANY(m.lexemes)
)
SELECT tf.kind, tf.id,
       sum(t.idf * tf.tf * ({k1} + 1)
           / (tf.tf + {k1} * (1 - {b} + {b} * tf.token_len / %s::float8))) AS score
FROM tf JOIN terms t USING (cfg, lexeme)
GROUP BY tf.kind, tf.id
ORDER BY score DESC, tf.kind, tf.id
LIMIT %s
"""


@dataclass(frozen=True)
class Term:
    cfg: str
    lexeme: str
    df: int
    idf: float

    @property
    def bound(self) -> float:
        """The most this term can add to a passage's score (tf → ∞)."""
        return self.idf * (K1 + 1)


def idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def rank(
    *,
    text: str,
    scope: tuple[str, tuple[Any, ...]],
    note_scope: tuple[str, tuple[Any, ...]],
    limit: int,
    info: dict[str, Any] | None = None,
) -> list[tuple[tuple[str, int], float]]:
    """((kind, id), score), best first: the exact BM25 top `limit` of `text`'s lexemes over
    the passages that the SQL of `scope` (attachment id, search_config) and `note_scope`
    (note id, search_config) select. `info`, when given, receives how much was read."""
    scope_sql, scope_params = scope
    note_sql, note_params = note_scope
    params = (*scope_params, *note_params)
    with connection.cursor() as cursor:
        cursor.execute(
            _STATISTICS_SQL.format(scope=scope_sql, note_scope=note_sql), [*params, text, text]
        )
        rows = cursor.fetchall()
    n, total = int(rows[0][2] or 0), int(rows[0][3] or 0)
    terms = [Term(cfg, lexeme, int(df), idf(n, int(df))) for cfg, lexeme, df, _ in rows[1:] if df]
    if not terms or limit <= 0:
        return []
    avgdl = max(total / max(n, 1), 1.0)

    def score(essential: set[Term], k: int) -> list[tuple[tuple[str, int], float]]:
        sql = _SCORE_SQL.format(scope=scope_sql, note_scope=note_sql, k1=float(K1), b=float(B))
        arrays: list[list[Any]] = [
            [t.cfg for t in terms],
            [t.lexeme for t in terms],
            [t.idf for t in terms],
            [t in essential for t in terms],
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, *arrays, avgdl, k])
            return [((kind, int(pk)), float(s)) for kind, pk, s in cursor.fetchall()]

    # Pass 1: the passages holding the rarest term give a floor θ for the k-th score.
    rarest = max(terms, key=lambda t: (t.bound, t.cfg, t.lexeme))
    first = score({rarest}, limit)
    theta = first[-1][1] if len(first) == limit else 0.0
    # Terms that cannot reach θ even together are not essential (smallest bounds first).
    essential = set(terms)
    floor = 0.0
    for term in sorted(terms, key=lambda t: (t.bound, t.cfg, t.lexeme)):
        if floor + term.bound >= theta:
            break
        floor += term.bound
        essential.discard(term)
    if info is not None:
        info.update(terms=len(terms), essential=len(essential), theta=round(theta, 3))
    if essential <= {rarest}:
        return first  # every passage outside pass 1 scores below θ
    return score(essential, limit)
