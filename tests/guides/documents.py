"""Purpose-built manuals for the guide tests, written as PDFs by hand: a title page with the
author's name, a copyright page whose licence paragraph two unrelated manuals share, a table
of contents with dot leaders, chapters with headings and prose, a licence appended at the
back and an index."""

from __future__ import annotations

import io
import textwrap

import pikepdf
from pikepdf import Dictionary, Name

TITLE, HEADING, CONTENTS_LINE, BODY = 22, 15, 12, 10
CONTENTS = "In this booklet"  # a table of contents, by its shape alone
Block = tuple[int, str]  # (font size, text): a heading line or a paragraph

LICENCE = (
    "Permission is granted to copy, print and share this booklet in any medium, provided that "
    "this notice and the names of its authors are kept on every copy. Permission is granted to "
    "translate it into another language under the same conditions, except that this notice may "
    "be given in a translation the authors approve. No part of it may be sold without the "
    "written consent of the authors."
)
AUTHOR = "Ada Quillfeather"

BEE_CHAPTERS = [
    (
        "1 Introduction",
        [
            "This booklet explains how to keep a colony of honey bees through the year, from "
            "the first inspection in spring to the last feeding before winter. Honey bees live "
            "in colonies of many thousand workers around a single queen, and a beekeeper works "
            "with the colony rather than against it.",
            "The chapters follow the life of the hive: its frames and boxes, the queen and the "
            "workers, the seasons of the colony, swarming, the varroa mite, the honey harvest, "
            "beeswax and the winter feed.",
        ],
    ),
    (
        "2 The hive and its frames",
        [
            "A modern hive is a stack of wooden boxes, each holding removable frames on which "
            "the bees draw their comb. The lowest box is the brood chamber, where the queen lays "
            "eggs; the boxes above it are supers, where the workers store surplus honey.",
            "Frames are spaced by the bee space, a gap of about eight millimetres that bees leave "
            "open as a walkway instead of filling it with comb or propolis.",
            "Each frame carries a sheet of wax foundation embossed with the pattern of worker "
            "cells, which guides the bees to build straight comb that the beekeeper can lift out "
            "and inspect.",
            "A queen excluder between the brood chamber and the supers is a grid whose gaps let "
            "workers pass but hold back the larger queen, so that no eggs are laid among the "
            "honey.",
        ],
    ),
    (
        "3 The queen and the workers",
        [
            "The queen is the only fertile female of the colony and may lay two thousand eggs a "
            "day at the height of summer. Worker bees are sterile females that clean cells, nurse "
            "the larvae, build comb, guard the entrance and forage for nectar and pollen.",
            "Drones are the male bees; they do not forage and are driven out of the hive when "
            "the nectar flow ends in late summer.",
            "A worker bee lives about six weeks in summer. She spends her first three weeks inside"
            " the hive as a house bee and the rest of her life foraging in the fields around it.",
            "Foragers tell their sisters where flowers grow with the waggle dance, whose angle on "
            "the comb points to the food and whose length tells how far away it is.",
        ],
    ),
    (
        "4 Seasons of the colony",
        [
            "In early spring the colony expands quickly as the queen lays more eggs and the "
            "foragers bring in the first pollen from willow and crocus. By midsummer the brood "
            "nest is at its largest and the supers fill with honey.",
            "In autumn the colony shrinks, the workers raised then live through the winter, and "
            "the cluster keeps the queen warm by shivering its flight muscles.",
            "In June the main nectar flow begins when lime trees and clover bloom, and a strong "
            "colony can fill a super with honey in a week of warm weather.",
            "On cold winter days the bees stay in a tight cluster on the comb and eat their "
            "stores, leaving the hive only on mild afternoons to void their bowels.",
        ],
    ),
    (
        "5 Swarming",
        [
            "Swarming is how a colony reproduces: the old queen leaves with about half of the "
            "workers and the remaining bees raise a new queen from a queen cell. A beekeeper "
            "who finds sealed queen cells in May can prevent a swarm by making an artificial "
            "swarm, moving the queen to a new hive on the old site.",
            "A swarm that has settled on a branch can be shaken into a box and hived the same "
            "evening; the bees are gentle because they are full of honey and have no comb to "
            "defend.",
            "Clipping one wing of the queen does not stop a colony from swarming, but the swarm "
            "returns to the hive when the queen cannot follow it.",
        ],
    ),
    (
        "6 Varroa mites",
        [
            "The varroa mite is a parasite that feeds on developing bees inside sealed brood "
            "cells and spreads viruses through the colony. Untreated colonies usually collapse "
            "within two or three years, so the mite load must be counted on the hive floor and "
            "treated with oxalic acid in the broodless period of winter.",
            "A sticky board under an open mesh floor catches the mites that fall from the bees, "
            "and the daily count of fallen mites estimates how heavily the colony is infested.",
            "Drone brood is favoured by the mites, so cutting out a frame of sealed drone brood in"
            " May removes a large share of them from the hive.",
        ],
    ),
    (
        "7 Harvesting honey",
        [
            "Honey is ready to harvest when most cells in the super are capped with wax, which "
            "shows that the bees have dried the nectar to less than twenty percent water. The "
            "frames are uncapped with a warm knife and spun in an extractor, and the honey is "
            "strained through a fine sieve into buckets.",
            "Before the supers are taken, a clearer board with one-way escapes is placed under "
            "them for a day, so that the bees leave the honey and cannot return to it.",
            "Honey that crystallises in the jar is not spoiled; gentle warming in a water bath "
            "melts the crystals without harming its flavour.",
        ],
    ),
    (
        "8 Wax and comb",
        [
            "Beeswax is secreted by young workers from glands under their abdomen and shaped "
            "into hexagonal cells. Old dark brood comb should be replaced every few years, and "
            "the wax cappings from the harvest can be melted into clean blocks of beeswax.",
            "Propolis is a sticky resin that bees collect from tree buds and use to seal cracks in"
            " the hive; it glues frames to the boxes and must be scraped off with a hive tool.",
        ],
    ),
    (
        "9 Feeding in winter",
        [
            "A colony needs about twenty kilograms of stored honey to survive the winter. If the "
            "supers were taken, the beekeeper feeds thick sugar syrup in early autumn, so the "
            "bees can store it and cap it before the cold arrives.",
            "Fondant placed over the crown board in late winter gives a colony that is running "
            "short of stores a reserve it can reach without leaving the cluster.",
            "The hive entrance is narrowed with a mouse guard in autumn, which keeps mice out of "
            "the warm comb while the bees are clustered and cannot defend it.",
        ],
    ),
]
REUSE_TERMS = (
    "Appendix: Terms of reuse",
    [
        "The following terms govern any reproduction, adaptation or distribution of this "
        "work by a licensee. The licensor grants a worldwide, royalty-free, non-exclusive "
        "licence for the duration of the applicable copyright. The licensee may not impose "
        "further restrictions on the exercise of the rights granted herein.",
        "Any breach of these terms terminates the licence automatically; the rights are "
        "reinstated if the breach is cured within thirty days of notice. This licence is "
        "governed by the law of the place where the licensor resides, and any disputes shall "
        "be brought before its competent courts.",
    ],
)
BEE_INDEX = [
    "Index", "beeswax, 12", "brood chamber, 5", "drones, 6", "extractor, 11", "frames, 5, 12",
    "oxalic acid, 10", "queen cells, 9", "supers, 5, 11", "swarming, 9", "varroa, 10",
    "winter feeding, 13",
]  # fmt: skip
SAIL_CHAPTERS = [
    (
        "1 Rigging the dinghy",
        [
            "A sailing dinghy is rigged on the shore: the mast is stepped, the shrouds are "
            "tensioned and the mainsail is hoisted on its halyard. The boom holds the foot of "
            "the mainsail, and the kicking strap keeps the boom from rising in a gust.",
        ],
    ),
    (
        "2 Points of sail",
        [
            "A boat cannot sail straight into the wind; it sails close-hauled at about forty-five "
            "degrees to it, reaches across it and runs before it. The sheets are eased as the "
            "boat bears away and pulled in as it heads up towards the wind.",
        ],
    ),
    (
        "3 Tacking and gybing",
        [
            "Tacking turns the bow through the wind, and the crew moves across as the boom "
            "swings over. Gybing turns the stern through the wind, which swings the boom hard "
            "across the cockpit, so the helm calls the manoeuvre before the turn.",
        ],
    ),
    (
        "4 Capsize recovery",
        [
            "When a dinghy capsizes, the crew swims to the centreboard and stands on it to "
            "lever the hull upright, while the other sailor is scooped into the cockpit. A "
            "buoyancy aid must be worn whenever the boat is on the water.",
        ],
    ),
    (
        "5 Weather and tides",
        [
            "Before sailing, the skipper reads the forecast for wind strength and direction "
            "and checks the tide tables, because a strong ebb tide against the wind builds "
            "short steep waves at the mouth of an estuary.",
        ],
    ),
]


def manual(
    title: str, chapters: list[tuple[str, list[str]]], *, back: tuple[list[Block], ...] = (),
    version: str = "1.0",
) -> list[list[Block]]:  # fmt: skip
    """The pages of a manual: title page, copyright page, contents, a page per paragraph of
    each chapter (its heading on the first) and the `back` pages."""
    body: list[list[Block]] = []
    contents: list[Block] = [(HEADING, CONTENTS)]
    for heading, prose in chapters:  # a line per chapter, in a size the chunker takes for a heading
        contents.append((CONTENTS_LINE, f"{heading} {' .' * 12} {4 + len(body)}"))
        body += [[(HEADING, heading), (BODY, prose[0])], *[[(BODY, p)] for p in prose[1:]]]
    front: list[list[Block]] = [
        [(TITLE, title), (BODY, f"Version {version}"), (BODY, AUTHOR)],
        [(BODY, f"This booklet is {title}, version {version}."), (BODY, LICENCE)],
        contents,
    ]
    return front + body + list(back)


def bees(version: str = "1.0") -> list[list[Block]]:
    terms = [(HEADING, REUSE_TERMS[0]), *[(BODY, p) for p in REUSE_TERMS[1]]]
    index = [(HEADING, BEE_INDEX[0]), (BODY, "\n".join(BEE_INDEX[1:]))]
    return manual("Keeping Honey Bees", BEE_CHAPTERS, back=(terms, index), version=version)


def sailing() -> list[list[Block]]:
    return manual("Small Boat Sailing", SAIL_CHAPTERS)


def pdf(pages: list[list[Block]]) -> bytes:
    """The pages as a PDF in Helvetica: each block a heading line or a paragraph wrapped at
    90 characters (a line of its own for each of its lines), a blank line after it."""
    out = pikepdf.new()
    font = out.make_indirect(
        Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica,
                   Encoding=Name.WinAnsiEncoding)
    )  # fmt: skip

    def literal(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    for blocks in pages:
        page = out.add_blank_page(page_size=(612, 792))
        page.Resources = Dictionary(Font=Dictionary(F1=font))
        ops, y = ["BT"], 740.0
        for size, text in blocks:
            lines = [w for part in text.split("\n") for w in textwrap.wrap(part, 90) or [""]]
            for line in lines:
                ops.append(f"/F1 {size} Tf 1 0 0 1 60 {y:.1f} Tm ({literal(line)}) Tj")
                y -= size * 1.4
            y -= size
        ops.append("ET")
        page.Contents = out.make_stream("\n".join(ops).encode("cp1252"))
    buffer = io.BytesIO()
    out.save(buffer)
    return buffer.getvalue()
