"""The word lists behind the slot guard (:mod:`cachekit.semantic.policy.slots`): units, number
words, months, negations, opposite poles, name cues and function words. Data only, built once at
import."""

from __future__ import annotations

__all__ = [
    "AMBIGUOUS",
    "ARTICLES",
    "AXIS_NAMES",
    "CUES",
    "CUE_AFTER",
    "CUE_BEFORE",
    "FUNCTION_WORDS",
    "MONTHS",
    "NEGATIONS",
    "NOT_NAMES",
    "NUMBER_WORDS",
    "ORDER_AUX",
    "ORDER_FOR_VERBS",
    "ORDER_FROM",
    "ORDER_INFINITIVES",
    "ORDER_JOINERS",
    "ORDER_LOSE",
    "ORDER_MARKERS",
    "ORDER_SKIP",
    "ORDER_STOP",
    "ORDER_SUBORDINATE",
    "ORDER_SYMMETRIC",
    "ORDER_THAN",
    "ORDER_TO",
    "ORDER_TO_THAN",
    "ORDER_VERBS",
    "ORDER_WIN",
    "ORDER_WITH_VERBS",
    "ORDINALS",
    "PARTICLES",
    "PARTIES",
    "POLES",
    "POLE_WORDS",
    "SCALES",
    "SMALL",
    "TENS",
    "UNITS",
]


UNITS: dict[str, str] = {}
for _canon, _forms in {
    "km": "km kms kilometer kilometers kilometre kilometres",
    "m": "m meter meters metre metres",
    "cm": "cm centimeter centimeters centimetre centimetres",
    "mm": "mm millimeter millimeters millimetre millimetres",
    "mi": "mi mile miles",
    "ft": "ft foot feet",
    "kg": "kg kgs kilogram kilograms kilo kilos",
    "g": "g gram grams",
    "lb": "lb lbs pound pounds",
    "oz": "oz ounce ounces",
    "l": "l liter liters litre litres",
    "ml": "ml milliliter milliliters millilitre millilitres",
    "s": "s sec secs second seconds",
    "ms": "ms millisecond milliseconds",
    "min": "min mins minute minutes",
    "h": "h hr hrs hour hours",
    "day": "day days",
    "week": "week weeks",
    "month": "month months",
    "year": "year years yr yrs",
    "b": "byte bytes",
    "kb": "kb kib kilobyte kilobytes",
    "mb": "mb mib megabyte megabytes",
    "gb": "gb gib gigabyte gigabytes",
    "tb": "tb tib terabyte terabytes",
    "%": "% percent pct",
    "deg": "degree degrees °",
    "c": "c celsius °c",
    "f": "f fahrenheit °f",
    "usd": "$ usd dollar dollars bucks",
    "eur": "€ eur euro euros",
    "gbp": "£ gbp",
    "am": "am a.m.",
    "pm": "pm p.m.",
    "x": "x times",
    "px": "px pixel pixels",
    "mph": "mph",
    "kmh": "kmh kph km/h",
    "hz": "hz hertz",
    "ghz": "ghz",
    "mhz": "mhz",
    "w": "w watt watts",
    "kw": "kw kilowatt kilowatts",
    "v": "v volt volts",
    "cal": "cal calorie calories kcal",
    "core": "core cores",
    "gpu": "gpu gpus",
    "thread": "thread threads",
    "token": "token tokens",
    "char": "character characters char chars",
    "word": "word words",
    "page": "page pages",
}.items():
    for _form in _forms.split():
        UNITS[_form] = _canon

SMALL = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
}
TENS = {
    w: 10 * i
    for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
    if w != "_"
}
SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
ORDINALS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
    "thirteenth": 13,
    "fourteenth": 14,
    "fifteenth": 15,
    "sixteenth": 16,
    "seventeenth": 17,
    "eighteenth": 18,
    "nineteenth": 19,
    "twentieth": 20,
    "thirtieth": 30,
    "fortieth": 40,
    "fiftieth": 50,
    "sixtieth": 60,
    "seventieth": 70,
    "eightieth": 80,
    "ninetieth": 90,
    "hundredth": 100,
    "thousandth": 1000,
}
NUMBER_WORDS = set(SMALL) | set(TENS) | set(SCALES) | set(ORDINALS) | {"dozen"}
#: Number words that are as often not numbers ("which one", "wait a second", "first, ...").
AMBIGUOUS = frozenset({"one", "first", "second"})
MONTHS = {
    m: i + 1
    for i, m in enumerate(
        "january february march april may june july august september october november "
        "december".split()
    )
}
MONTHS.update({m[:3]: i for m, i in list(MONTHS.items())} | {"sept": 9})

NEGATIONS = frozenset(
    "not no never none nothing nobody nowhere neither nor without cannot unable "
    "dont doesnt didnt isnt arent wasnt werent wont wouldnt shouldnt couldnt cant havent "
    "hasnt hadnt mustnt neednt aint shant lack lacks lacking".split()
)

#: Oppositions: each line is one axis, its two sides separated by ``|``. Inflections (-s, -es,
#: -ed, -d, -ing, -er, -est) are added.
_OPPOSITIONS = """
enable activate turn_on switch_on power_on | disable deactivate turn_off switch_off power_off
log_in sign_in login signin | log_out sign_out logout signout
add insert append | remove
create | delete destroy
increase raise boost | decrease reduce lower
left | right
before prior | after
benefit advantage pro upside merit | drawback disadvantage con downside
upload | download
import | export
encrypt | decrypt
encode | decode
compress zip | decompress unzip
serialize | deserialize
lock | unlock
mount | unmount
install | uninstall
connect | disconnect
show | hide
include | exclude
allow permit | deny block forbid
accept | reject
buy purchase | sell
push | pull
read | write
input | output
client | server
start | stop
open | close
win | lose
gain | lose
maximum max | minimum min
high higher highest | low lower lowest
more | less fewer
most | least
best | worst
better | worse
fast faster fastest | slow slower slowest
hot | cold
big bigger large larger | small smaller
long longer | short shorter
young | old
first | last
above | below
over | under
inside | outside
north | south
east | west
male men man | female women woman
true | false
positive | negative
legal | illegal
possible | impossible
safe | unsafe dangerous
healthy | unhealthy
cheap cheaper | expensive
rich | poor
strong | weak
light | dark
day | night
summer | winter
rise | fall
love | hate
agree | disagree
visible | hidden invisible
public | private
sync synchronous | async asynchronous
horizontal | vertical
ascending asc | descending desc
uppercase | lowercase
internal | external
local | remote
inbound | outbound
upstream | downstream
earlier | later
past | future
yesterday | tomorrow
morning | evening
include | omit
success succeed | failure fail
valid | invalid
online | offline
"""


def _inflections(word: str) -> set[str]:
    forms = {word, word + "s", word + "es", word + "ed", word + "ing", word + "er", word + "est"}
    if word.endswith("e"):
        forms |= {word + "d", word[:-1] + "ing", word + "r", word + "st"}
    if word.endswith("y"):
        forms |= {word[:-1] + "ies", word[:-1] + "ied"}
    return forms


def _build_poles() -> dict[str, tuple[tuple[int, int], ...]]:
    poles: dict[str, set[tuple[int, int]]] = {}
    for axis, line in enumerate(x for x in _OPPOSITIONS.strip().splitlines() if x.strip()):
        for side, words in enumerate(line.split("|")):
            for word in words.split():
                for form in _inflections(word):
                    poles.setdefault(form, set()).add((axis, side))
    return {w: tuple(sorted(p)) for w, p in poles.items()}


POLES = _build_poles()
POLE_WORDS = frozenset(POLES)
AXIS_NAMES = [
    line.split("|")[0].split()[0] + "/" + line.split("|")[1].split()[0]
    for line in _OPPOSITIONS.strip().splitlines()
    if line.strip()
]

# Words that read as a name when capitalised inside a sentence but are not one.
#: Second words of the phrasal verbs in ``_OPPOSITIONS`` ("turn on", "log out").
PARTICLES = frozenset({"on", "off", "in", "out"})
NOT_NAMES = frozenset("i i'm i've i'd i'll ok okay mr mrs ms dr prof sir st".split())
CUE_BEFORE = frozenset(
    "install uninstall import require upgrade add".split()
)  # "pip install NAME", "import NAME"
CUE_AFTER = frozenset(
    "library libraries package packages module modules crate crates gem gems plugin plugins "
    "extension extensions framework frameworks".split()
)
CUES = CUE_BEFORE | CUE_AFTER
#: Words that do not change what is asked, when they are all that differs after a preamble.
FUNCTION_WORDS = frozenset(
    "a an the of to in on at for from by with about as into and or but if so than that this "
    "these those it its is are was were be been am do does did have has had will would shall "
    "should can could may might must what whats which who when where why how s please i me my "
    "you your we our us there here some any just also very really kindly thanks thank".split()
)
ARTICLES = frozenset("the a an my your our their this that it its python".split())


# ------------------------------------------------------------------------------------ order
# The order rule (``slots: order``) reads which of two slot values comes first in a directional
# frame: "from X to Y", "X to Y", "X into Y", "X -> Y", "X than Y", "X over Y", "X beat Y",
# "Y was beaten by X", "replace X with Y", "exchange X for Y". See ``slot_order``.

#: "X to Y": the value after these words is the target.
ORDER_TO = frozenset("to into towards toward onto -> --> => → ⟶".split())
#: "from X": the source, wherever it stands in the clause ("to Oslo from Paris").
ORDER_FROM = frozenset({"from"})
#: "X than Y", "X rather than Y", "X over Y", "X instead of Y": X is preferred or compared to Y.
ORDER_THAN = frozenset({"than", "over", "instead"})
#: "X superior to Y", "prefer X to Y": a "to" that compares, as "than" does.
ORDER_TO_THAN = frozenset(
    "superior inferior preferable prefer prefers preferred preferring senior junior".split()
)
#: "X won against Y" ("against" alone names a fixture, which reads both ways).
ORDER_WIN = frozenset("win wins won winning victory victories".split())
#: "X lost to Y": Y beat X.
ORDER_LOSE = frozenset("lose loses lost losing".split())
#: "X <verb> Y", or "Y was <verb> by X": a doer and a done-to.
ORDER_VERBS = frozenset(
    "beat beats beaten beating defeat defeats defeated defeating outplay outplays outplayed "
    "outscore outscores outscored overtake overtakes overtook overtaken outsell outsells outsold "
    "outrank outranks outranked outperform outperforms outperformed eliminate eliminates "
    "eliminated sue sues sued suing evict evicts evicted evicting hire hires hired fire fires "
    "fired pay pays paid owe owes owed invade invades invaded invading attack attacks attacked "
    "conquer conquers conquered kill kills killed acquire acquires acquired bully bullies "
    "bullied scam scams scammed rob robs robbed exceed exceeds exceeded surpass surpasses "
    "surpassed".split()
)
#: "replace X with Y" (but "compare X with Y" reads both ways).
ORDER_WITH_VERBS = frozenset(
    "replace replaces replaced replacing substitute substitutes substituted substituting".split()
)
#: "exchange X for Y".
ORDER_FOR_VERBS = frozenset(
    "exchange exchanges exchanged exchanging trade trades traded "
    "trading swap swaps swapped swapping".split()
)
#: Verbs that, right after "to", make it an infinitive ("music to listen to", "votes to elect
#: presidents"): no target follows.
ORDER_INFINITIVES = frozenset(
    "be do get make go come find use see know take give learn listen help catch elect work buy "
    "sell pay keep let put say tell ask think try start stop become leave call feel look watch "
    "read write speak talk hear play run move live stay visit travel eat drink sleep study teach "
    "show build create improve increase reduce avoid prevent protect save spend earn win lose "
    "join meet understand explain prove believe choose decide apply open close send receive "
    "bring carry hold follow lead change turn grow lift break fix clean cook drive fly ride walk "
    "swim sing dance draw paint check test measure compare convert translate install remove add "
    "delete update upgrade download upload connect access enter sign register contact reach "
    "handle manage deal cope treat cure heal lose gain attract impress convince persuade "
    "motivate focus concentrate remember forget forgive survive succeed fail invest hire fire "
    "tackle fight kill attack defend support post share answer solve".split()
)
#: Words whose clause reads both ways: "compare X to Y", "the distance from X to Y", "X vs Y",
#: "the difference between X and Y", "is X similar to Y".
ORDER_SYMMETRIC = frozenset(
    "compare compared compares comparing comparison comparisons similar similarity "
    "similarities equal equals equivalent identical close distance distances far "
    "farther further difference differences different differ differs between vs versus "
    "relationship relationships relation relations related married marry connected "
    "compatible".split()
)
#: Between two parties these make a list, not an order ("a tenant and a landlord").
ORDER_JOINERS = frozenset("and or nor vs versus between with & /".split())
#: Skipped inside a slot phrase: articles, possessives, intensifiers ("from a tenant",
#: "much bigger than", "rather than").
ORDER_SKIP = frozenset(
    "a an the my your our their his her its this that these those some any each every more "
    "less much even far way rather lot ever already actually recently still".split()
)
#: Auxiliaries skipped before a verb frame ("was beaten", "has beaten").
ORDER_AUX = frozenset(
    "is are was were be been being get gets got has have had do does did will would can "
    "could should may might must".split()
)
#: Words that start a clause of its own inside a sentence, for the parties' order.
ORDER_SUBORDINATE = frozenset(
    "if when whenever because while although though unless but since until once who whom "
    "whose which".split()
)
#: Parties whose order is their role even without a frame: "can a landlord evict a tenant" is
#: not "can a tenant evict a landlord".
PARTIES = frozenset(
    "tenant landlord renter lessee lessor buyer seller purchaser vendor employer employee boss "
    "worker teacher student pupil professor doctor patient lawyer client lender borrower "
    "creditor debtor plaintiff defendant prosecutor victim attacker sender recipient receiver "
    "customer merchant supplier contractor subcontractor host guest parent child husband wife "
    "boyfriend girlfriend landlady licensor licensee insurer insured franchisor franchisee "
    "mother father son daughter".split()
)
#: Words that end a slot phrase (everything in ``FUNCTION_WORDS``, the markers and negations).
ORDER_STOP = (
    FUNCTION_WORDS
    | ORDER_TO
    | ORDER_FROM
    | ORDER_THAN
    | ORDER_JOINERS
    | ORDER_AUX
    | NEGATIONS
    | frozenset({"against"})
) - ORDER_SKIP
#: A clause without one of these (or two parties) has no order to read.
ORDER_MARKERS = (
    ORDER_TO | ORDER_FROM | ORDER_THAN | ORDER_VERBS | frozenset({"against", "with", "for"})
)
