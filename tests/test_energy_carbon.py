"""Carbon intensity for every country, the main aggregates and cloud regions from one cited,
dated table (Ember, CC BY 4.0); a live Electricity Maps source tested against a loopback HTTP
server (no network); clear errors listing close matches."""

from __future__ import annotations

import json
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from urllib.parse import parse_qs, urlparse

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.energy import carbon
from joulebound.energy.carbon import carbon_intensity


def _doc(name: str) -> dict:
    path = resources.files("joulebound.energy") / "data" / name
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_the_table_covers_every_country_with_source_licence_and_year():
    doc = _doc("carbon_intensity.toml")
    assert "Ember" in doc["source"] and "CC BY-SA 4.0" in doc["licence"] and "Ember" in doc["licence"] and doc["compiled"]
    rows = doc["regions"]
    iso2 = [r["iso2"] for r in rows.values() if "iso2" in r]
    assert len(iso2) >= 200 and len(set(iso2)) == len(iso2)     # every country, once
    for r in rows.values():
        assert 2015 <= r["year"] <= 2030 and 0 <= r["g_per_kwh"] < 1500
    for code in ("US", "CN", "IN", "DE", "FR", "GB", "JP", "BR", "ZA", "AU", "NG", "KE", "IS",
                 "WORLD", "EU", "EUROPE", "ASIA", "AFRICA", "OECD", "NORTH_AMERICA"):
        ci = carbon_intensity(code)
        assert ci.g_per_kwh > 0 and ci.year is not None and str(ci.year) in ci.source
        assert ci.source.startswith("published:") and "CC BY 4.0" in ci.source
    # alpha-2, alpha-3 and the name give the same row
    assert carbon_intensity("FR") == carbon_intensity("fra") == carbon_intensity(" France ")
    assert carbon_intensity("united states").g_per_kwh == carbon_intensity("USA").g_per_kwh
    assert carbon_intensity("FR").g_per_kwh < 100 < carbon_intensity("PL").g_per_kwh


def test_every_cloud_region_maps_to_its_countrys_row():
    regions = carbon.cloud_regions()
    for provider in ("aws", "gcp", "azure"):
        assert sum(k.startswith(provider + ":") for k in regions) >= 25
    for key, r in regions.items():
        ci = carbon_intensity(key)
        assert ci.g_per_kwh == carbon_intensity(r["country"]).g_per_kwh, key
        assert ci.region == key and f"({r['country']}) national" in ci.source
    # a bare name only one provider uses is enough; providers' own spellings differ
    assert carbon_intensity("eu-west-3").g_per_kwh == carbon_intensity("FR").g_per_kwh
    assert carbon_intensity("eu-west-3").region == "aws:eu-west-3"
    assert carbon_intensity("gcp:europe-north1").g_per_kwh == carbon_intensity("FI").g_per_kwh
    assert carbon_intensity("azure:westeurope").g_per_kwh == carbon_intensity("NL").g_per_kwh


def test_unknown_region_is_a_clear_error_with_close_matches():
    with pytest.raises(JouleboundError, match=r"unknown carbon-intensity region 'Frnace'.*"
                                              r"Close matches: .*FR \(France\)"):
        carbon_intensity("Frnace")
    with pytest.raises(JouleboundError, match=r"Close matches: .*aws:us-east-1"):
        carbon_intensity("us-east-9")
    with pytest.raises(JouleboundError, match="gCO2e per kWh"):
        carbon_intensity("Atlantis")
    with pytest.raises(JouleboundError, match=">= 0"):
        carbon_intensity("-5")
    assert carbon_intensity("350").grams(3.6e6) == pytest.approx(350.0)


class _Api(BaseHTTPRequestHandler):
    """Electricity Maps v3 stand-in: /carbon-intensity/latest?zone=Z with header auth-token."""

    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        zone = parse_qs(url.query).get("zone", [""])[0]
        type(self).seen.append((url.path, zone))
        if self.headers.get("auth-token") != "k3y":
            return self._send(401, {"message": "Invalid auth-token"})
        if url.path != "/v3/carbon-intensity/latest" or zone not in ("FR", "US-CAL-CISO"):
            return self._send(404, {"error": f"Zone '{zone}' does not exist."})
        g = 31 if zone == "FR" else 212
        return self._send(200, {"zone": zone, "carbonIntensity": g,
                                "datetime": "2026-12-04T16:00:00.000Z",
                                "emissionFactorType": "lifecycle", "isEstimated": False})

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(carbon.API_URL_ENV, f"http://127.0.0.1:{server.server_port}/v3")
    monkeypatch.setenv(carbon.API_KEY_ENV, "k3y")
    _Api.seen = []
    yield _Api
    server.shutdown()
    server.server_close()


def test_live_intensity_from_electricity_maps(api, monkeypatch):
    ci = carbon_intensity("live:FR")
    assert ci.g_per_kwh == 31 and ci.region == "FR" and ci.year is None
    assert ci.source.startswith("live: Electricity Maps") and "2026-12-04T16:00" in ci.source
    assert carbon_intensity("electricitymaps:US-CAL-CISO").g_per_kwh == 212
    # a cloud region or an alpha-3 code asks for its country's zone
    assert carbon_intensity("live:aws:eu-west-3").g_per_kwh == 31
    assert carbon_intensity("live:FRA").g_per_kwh == 31
    assert [z for _, z in api.seen] == ["FR", "US-CAL-CISO", "FR", "FR"]
    with pytest.raises(JouleboundError, match="zone 'XX' is unknown.*does not exist"):
        carbon_intensity("live:XX")
    monkeypatch.setenv(carbon.API_KEY_ENV, "wrong")
    with pytest.raises(JouleboundError, match="API key was refused: Invalid auth-token"):
        carbon_intensity("live:FR")
    monkeypatch.delenv(carbon.API_KEY_ENV)
    with pytest.raises(JouleboundError, match="needs an Electricity Maps API key: export "
                                              "ELECTRICITYMAPS_API_KEY"):
        carbon_intensity("live:FR")


def test_live_source_unreachable_is_a_clear_error(monkeypatch):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                  # nothing listens there
    monkeypatch.setenv(carbon.API_URL_ENV, f"http://127.0.0.1:{port}/v3")
    monkeypatch.setenv(carbon.API_KEY_ENV, "k3y")
    with pytest.raises(JouleboundError, match="could not be reached.*--carbon-intensity FR"):
        carbon_intensity("live:FR")


def test_the_shipped_table_is_what_the_derivation_makes():
    pytest.importorskip("pycountry")
    doc = _doc("carbon_intensity.toml")
    rows = doc["regions"]
    names = {v: k for k, v in carbon.AGGREGATES.items()}
    ember = {code: {"country_code": code if "iso2" in r else "",
                    "country_or_region": r["name"] if "iso2" in r else names[code],
                    "year": r["year"], "emissions_intensity_gco2_per_kwh": r["g_per_kwh"]}
             for code, r in rows.items()}
    commit = doc["source"].split("commit ")[1].split(" ")[0]
    text = carbon.derive_table(ember, "b459b5e543c6cfb49ad429627e325e14c45697e1",
                               doc["compiled"])
    assert commit == "b459b5e"
    shipped = (resources.files("joulebound.energy") / "data" / "carbon_intensity.toml"
               ).read_text(encoding="utf-8")
    assert text == shipped


def test_list_prints_every_code_with_its_figure_and_the_source(capsys):
    assert carbon.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "FR " in out and "aws:us-east-1" in out and "-> US" in out
    assert "Ember yearly electricity data, CC BY 4.0" in out
    assert carbon.main(["only-one-arg"]) == 2
