"""Carbon: gCO2e of an energy figure, from a carbon intensity given as a number, a country, a
grid aggregate, a cloud region, or read live from Electricity Maps.

``--carbon-intensity VALUE`` (and ``carbon_intensity=`` of the callbacks) takes:

- a number: gCO2e per kWh, "given by the user";
- a country (ISO 3166 alpha-2 ``FR`` or alpha-3 ``FRA`` or its name ``France``) or an aggregate
  (``WORLD``, ``EU``, ``EUROPE``, ``ASIA``, ``AFRICA``, ``NORTH_AMERICA``, ``OECD``, ``G20``, ...):
  the latest annual average of the shipped table ``data/carbon_intensity.toml`` (Ember's yearly
  electricity data, CC BY 4.0; the year of each row is kept and printed), labeled published;
- a cloud region (``aws:us-east-1``, ``gcp:europe-west4``, ``azure:westeurope``, or the bare
  region name when only one provider has it): the country its data centres are in
  (``data/cloud_regions.toml``, from the providers' region lists), then that country's row;
- ``live:ZONE`` (an Electricity Maps zone such as ``FR``, ``DE``, ``US-CAL-CISO``, or any of the
  above codes, mapped to its country): the latest intensity from the Electricity Maps API with the
  user's key (``ELECTRICITYMAPS_API_KEY``; ``ELECTRICITYMAPS_API_URL`` overrides the endpoint),
  read once when the value is parsed, labeled live.

gCO2e = kWh × intensity, with the provenance of the energy it is computed from (measured energy
× a published intensity is still an estimate of emissions: a national annual average is not your
supplier's mix, nor the hour's).

``python -m joulebound.energy.carbon EMBER_JSON`` re-derives the shipped table from CO2.js's
compilation of Ember's data (see :func:`derive_table`).
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from joulebound.core.errors import JouleboundError

J_PER_KWH = 3.6e6
#: environment variables of the live source
API_KEY_ENV = "ELECTRICITYMAPS_API_KEY"
API_URL_ENV = "ELECTRICITYMAPS_API_URL"
API_URL = "https://api.electricitymaps.com/v3"
#: seconds before a live request gives up
API_TIMEOUT_S = 10.0
LIVE_PREFIXES = ("live:", "electricitymaps:")
CLOUD_PROVIDERS = ("aws", "gcp", "azure")


@dataclass(frozen=True)
class CarbonIntensity:
    """A carbon intensity: ``g_per_kwh`` (gCO2e/kWh), the region it is for ("" for a number the
    user gave), its source, and the year it is an average of (``None``: a number or live)."""

    g_per_kwh: float
    region: str
    source: str
    year: int | None = None

    def describe(self) -> str:
        where = f"{self.region}, " if self.region else ""
        return f"{self.g_per_kwh:g} gCO2e/kWh ({where}{self.source})"

    def grams(self, energy_j: float | None) -> float | None:
        """gCO2e of ``energy_j`` (J); ``None`` for ``None``."""
        return None if energy_j is None else energy_j / J_PER_KWH * self.g_per_kwh


@dataclass(frozen=True)
class Row:
    """One row of the shipped table: ``code`` (ISO alpha-3 or an aggregate's name), ``iso2``
    ("" for aggregates), ``name``, ``year`` and ``g_per_kwh`` (gCO2e/kWh, lifecycle)."""

    code: str
    iso2: str
    name: str
    year: int
    g_per_kwh: float


def _data(name: str) -> dict[str, Any]:
    path = resources.files("joulebound.energy") / "data" / name
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _norm(s: str) -> str:
    """Lookup key: upper case, runs of spaces, hyphens and underscores as one underscore."""
    return re.sub(r"[\s_\-]+", "_", s.strip().upper())


@lru_cache(maxsize=1)
def table() -> tuple[dict[str, Row], str]:
    """The shipped table: every lookup key (ISO alpha-2, alpha-3, normalised name) -> its row,
    and the short citation printed beside a figure (source and licence; the file has the
    full one)."""
    doc = _data("carbon_intensity.toml")
    keys: dict[str, Row] = {}
    for code, r in doc["regions"].items():
        row = Row(code, r.get("iso2", ""), r["name"], int(r["year"]), float(r["g_per_kwh"]))
        for k in (code, row.iso2, row.name):
            if k:
                keys.setdefault(_norm(k), row)
    return keys, str(doc["cite"])


@lru_cache(maxsize=1)
def cloud_regions() -> dict[str, dict[str, str]]:
    """``"provider:region"`` -> ``{country (ISO alpha-2), location, provider, region}``."""
    doc = _data("cloud_regions.toml")
    out = {}
    for provider in CLOUD_PROVIDERS:
        for region, r in doc[provider].items():
            out[f"{provider}:{region}"] = {"country": r["country"], "location": r["location"],
                                           "provider": provider, "region": region}
    return out


def _cloud(code: str) -> dict[str, str] | None:
    """The cloud region ``code`` names (``provider:region`` or a region name only one provider
    has), or ``None``."""
    regions = cloud_regions()
    c = code.strip().lower()
    if c in regions:
        return regions[c]
    hits = [v for k, v in regions.items() if k.split(":", 1)[1] == c]
    return hits[0] if len(hits) == 1 else None


def choices() -> list[str]:
    """Every accepted region code (countries as ISO alpha-2 where they have one, aggregates,
    cloud regions), for help texts and errors."""
    keys, _ = table()
    rows = {r.code: r for r in keys.values()}
    codes = sorted(r.iso2 or _norm(r.name) for r in rows.values())
    return codes + sorted(cloud_regions())


def _unknown(value: str) -> JouleboundError:
    import difflib

    keys, _ = table()
    names = {k: f"{r.iso2 or _norm(r.name)} ({r.name})" for k, r in keys.items()}
    names |= {_norm(k): k for k in cloud_regions()}
    cand = difflib.get_close_matches(_norm(value), list(names), n=5, cutoff=0.6)
    low = value.strip().lower()
    cand += [k for k in cloud_regions() if low and low in k and k not in cand][:5]
    close = []
    for c in cand:
        label = names.get(c, c)
        if label not in close:
            close.append(label)
    hint = f" Close matches: {', '.join(close[:6])}." if close else ""
    return JouleboundError(
        f"unknown carbon-intensity region {value!r}.{hint} Give a country (ISO code such as FR "
        "or FRA, or its name), WORLD, EU, a cloud region (aws:us-east-1, gcp:europe-west4, "
        "azure:westeurope), live:ZONE (Electricity Maps), or gCO2e per kWh, e.g. "
        "--carbon-intensity 350; `python -m joulebound.energy.carbon --list` lists the codes")


def lookup(code: str) -> CarbonIntensity:
    """The published annual average of a country, aggregate or cloud region (see the module
    docstring); a clear error listing close matches for an unknown one."""
    keys, source = table()
    cloud = _cloud(code)
    if cloud is not None:
        row = keys.get(_norm(cloud["country"]))
        if row is None:    # pragma: no cover - tests/test_energy_carbon.py checks every region
            raise JouleboundError(f"cloud region {code!r} maps to {cloud['country']!r}, which "
                                  "is not in the carbon-intensity table")
        return CarbonIntensity(
            row.g_per_kwh, f"{cloud['provider']}:{cloud['region']}",
            f"published: {cloud['location']} -> {row.name} ({row.iso2}) national "
            f"{row.year} annual average, {source}", row.year)
    row = keys.get(_norm(code))
    if row is None:
        raise _unknown(code)
    return CarbonIntensity(row.g_per_kwh, row.iso2 or _norm(row.name),
                           f"published: {row.name}, {row.year} annual average, {source}",
                           row.year)


def live(zone: str, api_key: str | None = None, base_url: str | None = None,
         timeout_s: float = API_TIMEOUT_S) -> CarbonIntensity:
    """The latest carbon intensity of Electricity Maps zone ``zone`` (a zone name such as
    ``US-CAL-CISO``, or a country / cloud region of :func:`lookup`, mapped to its country).

    Args:
        api_key: Electricity Maps API key (default ``$ELECTRICITYMAPS_API_KEY``).
        base_url: API root (default ``$ELECTRICITYMAPS_API_URL``, else :data:`API_URL`).
        timeout_s: seconds before giving up.
    """
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
    if not key:
        raise JouleboundError(
            f"live carbon intensity needs an Electricity Maps API key: export {API_KEY_ENV}=... "
            "(a free key: https://portal.electricitymaps.com), or use the published annual "
            f"average, e.g. --carbon-intensity {zone.split(':')[-1] or 'FR'}")
    zone = zone.strip()
    cloud = _cloud(zone)
    if cloud is not None:
        zone = cloud["country"]
    elif len(zone) == 3 and zone.isalpha():        # an ISO alpha-3 code: its alpha-2 zone
        row = table()[0].get(_norm(zone))
        zone = row.iso2 if row is not None and row.iso2 else zone
    root = (base_url or os.environ.get(API_URL_ENV) or API_URL).rstrip("/")
    url = f"{root}/carbon-intensity/latest?{urllib.parse.urlencode({'zone': zone})}"
    req = urllib.request.Request(url, headers={"auth-token": key,
                                               "User-Agent": "joulebound"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            doc = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        detail = _api_message(exc)
        what = ("the API key was refused" if exc.code in (401, 403)
                else f"zone {zone!r} is unknown or has no data" if exc.code in (400, 404)
                else f"HTTP {exc.code}")
        raise JouleboundError(f"Electricity Maps: {what}{detail}. Check {API_KEY_ENV} and the "
                              "zone (https://app.electricitymaps.com/map), or use the published "
                              "annual average (--carbon-intensity FR)") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise JouleboundError(f"Electricity Maps could not be reached at {root} ({reason}); "
                              "use the published annual average (--carbon-intensity FR) or a "
                              "number") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise JouleboundError(f"Electricity Maps answered something that is not JSON ({exc})"
                              ) from None
    g = doc.get("carbonIntensity") if isinstance(doc, dict) else None
    if not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
        raise JouleboundError(f"Electricity Maps gave no carbon intensity for zone {zone!r} "
                              f"(answer: {str(doc)[:200]})")
    when = doc.get("datetime", "")
    kind = doc.get("emissionFactorType", "")
    est = " estimated" if doc.get("isEstimated") else ""
    return CarbonIntensity(float(g), str(doc.get("zone", zone)),
                           f"live: Electricity Maps{est}, {when}"
                           + (f", {kind}" if kind else ""), None)


def _api_message(exc: Any) -> str:
    try:
        body = json.loads(exc.read().decode("utf-8"))
        msg = body.get("error") or body.get("message")
        return f": {msg}" if msg else ""
    except Exception:
        return ""


def carbon_intensity(value: str | float | None) -> CarbonIntensity | None:
    """Parse ``--carbon-intensity``: a number (gCO2e/kWh), a region code, or ``live:ZONE``."""
    if value is None or value == "":
        return None
    try:
        g = float(value)
    except (TypeError, ValueError):
        text = str(value).strip()
        for p in LIVE_PREFIXES:
            if text.lower().startswith(p):
                return live(text[len(p):])
        return lookup(text)
    if not math.isfinite(g) or g < 0:
        raise JouleboundError(f"--carbon-intensity must be >= 0 gCO2e/kWh, got {value!r}")
    return CarbonIntensity(g, "", "given by the user")


# -- the shipped table, derived -------------------------------------------------------------

#: aggregates of Ember's table under the codes joulebound accepts
AGGREGATES = {"World": "WORLD", "EU": "EU", "Europe": "EUROPE", "Asia": "ASIA",
              "Africa": "AFRICA", "ASEAN": "ASEAN", "G20": "G20", "G7": "G7", "OECD": "OECD",
              "Middle East": "MIDDLE_EAST", "North America": "NORTH_AMERICA",
              "Latin America and Caribbean": "LATIN_AMERICA_AND_CARIBBEAN",
              "Oceania": "OCEANIA"}
#: ISO alpha-3 codes pycountry does not know (user-assigned codes)
_ISO2_EXTRA = {"XKX": "XK"}

HEADER = """\
# Carbon intensity of electricity generation (gCO2e per kWh, lifecycle), per country and
# aggregate: the latest year Ember reports for each. Used by --carbon-intensity REGION
# (joulebound.energy.carbon). A national annual average is not your supplier's mix nor the hour's:
# pass a number when you know it, or live:ZONE (Electricity Maps, your API key).
# Derived by `python -m joulebound.energy.carbon average-intensities.json COMMIT DATE > this
# file` (rounded to 0.01 g; ISO alpha-2 codes added from ISO 3166 via pycountry) from CO2.js's compilation of
# Ember's yearly data, data/output/average-intensities.json of
# https://github.com/thegreenwebfoundation/co2.js at commit {commit}.
"""


def derive_table(ember: dict[str, dict[str, Any]], commit: str, compiled: str) -> str:
    """The text of ``data/carbon_intensity.toml`` from CO2.js's ``average-intensities.json``
    (``{key: {country_code, country_or_region, year, emissions_intensity_gco2_per_kwh}}``):
    countries under their ISO alpha-3 code with their alpha-2 code, aggregates under
    :data:`AGGREGATES`' names. ``commit``: the CO2.js commit read; ``compiled``: its date
    (when CO2.js fetched Ember's data)."""
    try:
        import pycountry
    except ImportError as exc:
        raise JouleboundError("deriving the table needs pycountry: pip install pycountry"
                              ) from exc
    rows = []
    years = set()
    for r in ember.values():
        iso3 = r.get("country_code") or ""
        if iso3:
            c = pycountry.countries.get(alpha_3=iso3)
            iso2 = c.alpha_2 if c else _ISO2_EXTRA.get(iso3, "")
            code = iso3
        elif r["country_or_region"] in AGGREGATES:
            iso2, code = "", AGGREGATES[r["country_or_region"]]
        else:
            continue
        years.add(int(r["year"]))
        name = r["country_or_region"].replace('"', "'")
        g = round(float(r["emissions_intensity_gco2_per_kwh"]), 2)
        iso2_part = f'iso2 = "{iso2}", ' if iso2 else ""
        rows.append((code, f'{code} = {{ {iso2_part}name = "{name}", year = {int(r["year"])}, '
                           f"g_per_kwh = {g:g} }}"))
    rows.sort()
    head = HEADER.format(commit=commit)
    meta = (f'source = "Ember, Yearly Electricity Data (emissions intensity, gCO2e/kWh; '
            f'{min(years)}-{max(years)}, latest year per country), via CO2.js '
            f'average-intensities.json (commit {commit[:7]} of {compiled})"\n'
            'cite = "Ember yearly electricity data, CC BY 4.0"\n'
            'licence = "CC BY-SA 4.0: the figures are Ember\'s (CC BY 4.0, '
            'https://ember-climate.org/creative-commons/), compiled by The Green Web Foundation\'s '
            'CO2.js, whose README states CC BY-SA 4.0 for its data; this derived table is shared '
            'under CC BY-SA 4.0 (the stricter), attribution Ember and CO2.js"\n'
            f'url = "https://ember-energy.org/data/yearly-electricity-data/"\n'
            f'compiled = "{compiled}"\n'
            f"years = [{min(years)}, {max(years)}]\n")
    return head + "\n" + meta + "\n[regions]\n" + "\n".join(r for _, r in rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``--list``: print every code with its figure; ``EMBER_JSON COMMIT DATE``: print the
    derived table (see :func:`derive_table`)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--list"]:
        keys, source = table()
        for r in sorted({r.code: r for r in keys.values()}.values(), key=lambda r: r.name):
            sys.stdout.write(f"{r.iso2 or _norm(r.name):28} {r.g_per_kwh:8.2f} {r.year} "
                             f"{r.name}\n")
        for k, v in sorted(cloud_regions().items()):
            sys.stdout.write(f"{k:28} -> {v['country']} ({v['location']})\n")
        sys.stdout.write(f"source: {source}\n")
        return 0
    if len(args) != 3:
        sys.stderr.write("usage: python -m joulebound.energy.carbon --list | EMBER_JSON COMMIT "
                         "DATE\n")
        return 2
    with open(args[0], encoding="utf-8") as f:
        sys.stdout.write(derive_table(json.load(f), args[1], args[2]))
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BrokenPipeError:        # `... --list | head`
        raise SystemExit(0) from None
