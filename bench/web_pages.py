"""The pages of the web grounding set: a French hospital web application (patients, lab
results, a form, the form under a modal dialog, a dense inbox, prescriptions), as HTML.

Pure: a page kind, a part of the set, a layout and a seed in, one HTML document out.
Every control a person would click carries ``data-ctl``; a row's or a card's controls
carry the text that says which one (``data-row``: the row's first cell or the card's
heading). Each held-out part has its own data (other patients, tests, drugs, messages),
its own font and colours, so that nothing tuned on the ``tuning`` part has seen it:
``held-out`` (held-out-1 in docs/grounding.md, seen since: a kind of its misses was read
while tuning) and ``held-out-2``, recorded after it and never looked at while tuning. Its
font, Nimbus Sans, is Debian's ``fonts-urw-base35`` (needed to record it again).
"""

from __future__ import annotations

import html
import random
from dataclasses import dataclass

PAGES = ("patients", "labo", "form", "dialog", "inbox", "prescriptions")
PARTS = ("tuning", "held-out", "held-out-2")
LAYOUTS = ("recorded", "moved")


@dataclass(frozen=True, slots=True)
class Theme:
    font: str
    primary: str
    nav: str
    link: str


THEMES = {"tuning": Theme("Liberation Sans", "#1565c0", "#1f2d3d", "#9aa3ad"),
          "held-out": Theme("DejaVu Sans", "#2e7d32", "#3b2f4a", "#a0a0a0"),
          "held-out-2": Theme("Nimbus Sans", "#ad1457", "#263238", "#98a2ac")}
NAMES = {"tuning": ["Martin", "Bernard", "Dubois", "Thomas", "Robert", "Richard", "Petit",
                    "Durand", "Leroy", "Moreau", "Simon", "Laurent"],
         "held-out": ["Lefèvre", "Michel", "Garcia", "David", "Bertrand", "Roux", "Vincent",
                      "Fournier", "Morel", "Girard", "André", "Mercier"],
         "held-out-2": ["Bonnet", "Dupont", "Lambert", "Fontaine", "Rousseau", "Blanc",
                        "Guérin", "Muller", "Henry", "Roussel", "Nicolas", "Perrin"]}
FIRST = {"tuning": ["Jeanne", "Paul", "Claire", "Louis", "Anne", "Marc", "Julie", "Hugo"],
         "held-out": ["Sophie", "Pierre", "Camille", "Nicolas", "Élise", "Jules", "Inès",
                      "Yves"],
         "held-out-2": ["Lucie", "Antoine", "Margaux", "Théo", "Agnès", "Rémi", "Chloé",
                        "Gaël"]}
TESTS = {"tuning": [("Hémoglobine", "g/dL"), ("Créatinine", "µmol/L"), ("Potassium", "mmol/L"),
                    ("Sodium", "mmol/L"), ("Glycémie", "mmol/L"), ("Leucocytes", "G/L"),
                    ("Plaquettes", "G/L"), ("CRP", "mg/L")],
         "held-out": [("Ferritine", "µg/L"), ("Urée", "mmol/L"), ("Calcium", "mmol/L"),
                      ("Albumine", "g/L"), ("Bilirubine", "µmol/L"), ("TSH", "mUI/L"),
                      ("Troponine", "ng/L"), ("Lactates", "mmol/L")],
         "held-out-2": [("Magnésium", "mmol/L"), ("Phosphore", "mmol/L"),
                        ("Cholestérol", "g/L"), ("Triglycérides", "g/L"), ("INR", "ratio"),
                        ("Procalcitonine", "µg/L"), ("Lipase", "UI/L"), ("Vitamine D", "nmol/L")]}
DRUGS = {"tuning": ["Amoxicilline", "Paracétamol", "Ibuprofène", "Oméprazole", "Héparine",
                    "Furosémide"],
         "held-out": ["Ceftriaxone", "Métformine", "Tramadol", "Lévothyrox", "Enoxaparine",
                      "Amlodipine"],
         "held-out-2": ["Vancomycine", "Prednisolone", "Morphine", "Bisoprolol", "Insuline",
                        "Spironolactone"]}
SERVICES = ["Cardiologie", "Pneumologie", "Urgences", "Gériatrie", "Chirurgie", "Pédiatrie"]
NAV = ["Accueil", "Patients", "Agenda", "Laboratoire", "Messagerie", "Déconnexion"]
ABSENT = ["Valider la prescription", "Sortie définitive", "Exporter en PDF",
          "Planning du bloc", "Transférer le patient"]
"""Labels on no page of the set: the right answer is no click."""
LOREM = ("Le patient a été revu ce matin en consultation de suivi. Les constantes sont "
         "stables, la douleur est mieux contrôlée depuis l'adaptation du traitement. Un "
         "contrôle biologique est prévu dans la semaine, avec un avis du médecin référent "
         "si la créatinine augmente. La famille a été informée des résultats.")
LOREMS = {"tuning": LOREM, "held-out": LOREM,
          "held-out-2": ("Reçue aux urgences hier soir pour une dyspnée, la patiente a été "
                         "transférée dans le service après un scanner sans anomalie. "
                         "L'oxygène a pu être diminué cette nuit ; une kinésithérapie "
                         "respiratoire est demandée. Merci de rappeler le pharmacien avant "
                         "toute modification du traitement anticoagulant.")}
"""The inbox's message text, by part (the first two parts share one)."""


def css(theme: Theme) -> str:
    return f"""
body {{ margin: 0; font-family: '{theme.font}', sans-serif; font-size: 14px; color: #222;
       background: #f4f6f8; }}
nav {{ background: {theme.nav}; padding: 10px 24px; display: flex; gap: 22px; }}
nav a {{ color: #c9d3dd; text-decoration: none; }}
main {{ padding: 18px 28px; display: flex; gap: 28px; }}
main.moved {{ flex-direction: row-reverse; }}
aside {{ width: 210px; }}
aside a {{ display: block; color: {theme.link}; text-decoration: none; margin: 6px 0; }}
section {{ flex: 1; background: #fff; padding: 16px 22px; border: 1px solid #dde2e7; }}
h1 {{ font-size: 20px; margin: 4px 0 14px; }}
h2 {{ font-size: 16px; margin: 10px 0 6px; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border-bottom: 1px solid #e3e7eb; padding: 7px 10px; text-align: left; }}
th {{ color: #555; font-weight: 600; }}
button {{ font: inherit; padding: 5px 12px; border: 1px solid #b8c0c8; background: #fff;
          border-radius: 3px; color: #222; }}
button.primary {{ background: {theme.primary}; border-color: {theme.primary}; color: #fff; }}
button.narrow {{ width: 120px; }}
a.link {{ color: {theme.link}; }}
.bar {{ margin: 12px 0; display: flex; gap: 10px; align-items: center; }}
.field {{ display: flex; gap: 12px; margin: 9px 0; align-items: center; }}
.field label {{ width: 170px; color: #444; }}
input, select {{ font: inherit; padding: 4px 6px; border: 1px solid #b8c0c8; width: 260px; }}
.card {{ border: 1px solid #dde2e7; padding: 8px 14px; margin: 10px 0; }}
.msg {{ border-bottom: 1px solid #e3e7eb; padding: 6px 0; font-size: 12.5px; }}
.msg p {{ margin: 2px 0; color: #555; }}
.backdrop {{ position: fixed; inset: 0; background: rgba(0, 0, 0, 0.5); }}
.dialog {{ position: fixed; left: 50%; top: 35%; transform: translate(-50%, -50%);
          background: #fff; padding: 20px 26px; width: 420px; border-radius: 4px; }}
.dialog .bar {{ justify-content: flex-end; }}
"""


def ctl(tag: str, text: str, row: str | None = None, cls: str = "",
        attrs: str = "") -> str:
    """A control the set labels (``data-ctl``), with the row or card it belongs to."""
    extra = f' data-row="{html.escape(row)}"' if row else ""
    klass = f' class="{cls}"' if cls else ""
    href = ' href="#"' if tag == "a" else ""
    return f"<{tag}{href}{klass} data-ctl{extra}{attrs}>{html.escape(text)}</{tag}>"


def page(kind: str, part: str, layout: str, seed: int) -> str:
    """The HTML of one page (module docstring)."""
    rng = random.Random(f"{kind}-{part}-{layout}-{seed}")
    theme = THEMES[part]
    nav = "".join(ctl("a", n) for n in NAV)
    side = ("<aside><h2>Raccourcis</h2>"
            + "".join(ctl("a", t) for t in ("Mes patients", "Comptes rendus", "Annuaire",
                                             "Aide en ligne"))
            + "<p style='color:#777;font-size:12px'>Version 4.2 – service informatique"
              "</p></aside>")
    body = BODIES[kind](rng, part, layout)
    main = f"<main class='{'moved' if layout == 'moved' else ''}'>{side}<section>{body}" \
           "</section></main>"
    title = {"patients": "Patients", "labo": "Résultats", "form": "Dossier",
             "dialog": "Dossier", "inbox": "Messagerie", "prescriptions": "Prescriptions"}
    return (f"<!doctype html><html lang='fr'><head><meta charset='utf-8'><title>Léa Santé – "
            f"{title[kind]}</title><style>{css(theme)}</style></head><body><nav>{nav}</nav>"
            f"{main}{DIALOG if kind == 'dialog' else ''}</body></html>")


def _patients(rng: random.Random, part: str, layout: str) -> str:
    names = rng.sample(NAMES[part], 9)
    rows = []
    for name in names:
        first = rng.choice(FIRST[part])
        who = f"{name.upper()} {first}"
        cells = [who, f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/"
                      f"{rng.randint(1935, 2010)}", rng.choice(SERVICES),
                 f"Ch. {rng.randint(100, 450)}"]
        if layout == "moved":
            cells = [cells[0], cells[2], cells[1], cells[3]]
        actions = ctl("button", "Détail", who) + " " + ctl("button", "Modifier", who)
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                    + f"<td>{actions}</td></tr>")
    heads = ["Patient", "Naissance", "Service", "Chambre"]
    if layout == "moved":
        heads = [heads[0], heads[2], heads[1], heads[3]]
    return ("<h1>Patients hospitalisés</h1><div class='bar'><input placeholder='Nom, IPP'> "
            + ctl("button", "Rechercher", cls="primary") + ctl("button", "Nouveau patient")
            + "</div><table><tr>" + "".join(f"<th>{h}</th>" for h in heads)
            + "<th></th></tr>" + "".join(rows) + "</table><div class='bar'>"
            + ctl("a", "Page précédente", cls="link") + ctl("a", "Page suivante", cls="link")
            + "</div>")


def _labo(rng: random.Random, part: str, layout: str) -> str:
    tests = rng.sample(TESTS[part], 7)
    rows = []
    for name, unit in tests:
        value = f"{rng.uniform(0.5, 150):.1f}"
        cells = [name, value, unit, f"{rng.randint(1, 28):02d}/03/2026"]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                    + f"<td>{ctl('button', 'Détail', name)}</td></tr>")
    buttons = [ctl("button", "Valider les résultats", cls="primary"),
               ctl("button", "Imprimer"), ctl("button", "Demander un contrôle")]
    if layout == "moved":
        buttons.reverse()
    return ("<h1>Résultats de laboratoire</h1><p>Prélèvement du 12/03/2026, "
            "laboratoire central.</p><table><tr><th>Examen</th><th>Valeur</th><th>Unité"
            "</th><th>Date</th><th></th></tr>" + "".join(rows) + "</table>"
            f"<div class='bar'>{''.join(buttons)}</div>")


def _form(rng: random.Random, part: str, layout: str) -> str:
    fields = ["Nom de naissance", "Prénom", "Date de naissance", "Médecin traitant",
              "Service", "Allergies connues"]
    if layout == "moved":
        rng.shuffle(fields)
    rows = "".join(f"<div class='field'><label>{f}</label><input value=''></div>"
                   for f in fields)
    bar = [ctl("button", "Enregistrer", cls="primary"), ctl("button", "Annuler"),
           ctl("button", "Valider et envoyer au secrétariat", cls="narrow")]
    if layout == "moved":
        bar.reverse()
    return (f"<h1>Dossier de {rng.choice(NAMES[part]).upper()} {rng.choice(FIRST[part])}</h1>"
            f"<div class='bar'>{ctl('button', 'Imprimer')}{ctl('a', 'Historique', cls='link')}"
            f"</div>{rows}<div class='bar'>{''.join(bar)}</div>")


DIALOG = ("<div class='backdrop'></div><div class='dialog' data-dialog><h2>Confirmer la "
          "modification</h2><p>Les changements du dossier seront enregistrés et visibles "
          "par l'équipe soignante.</p><div class='bar'>"
          + ctl("button", "Annuler") + ctl("button", "Enregistrer", cls="primary")
          + "</div></div>")


def _inbox(rng: random.Random, part: str, layout: str) -> str:
    out = ["<h1>Messagerie sécurisée</h1>"]
    for i, name in enumerate(rng.sample(NAMES[part], 10)):
        who = f"Dr {name}"
        start = rng.randint(0, 120)
        text = LOREMS[part][start:start + 150]
        out.append(f"<div class='msg'><b>{html.escape(who)}</b> – {i + 8}h{rng.randint(10, 59)}"
                   f" – Objet : {html.escape(rng.choice(SERVICES))}<p>{html.escape(text)}</p>"
                   f"{ctl('a', 'Répondre', who, cls='link')} "
                   f"{ctl('a', 'Archiver', who, cls='link')}</div>")
    return "".join(out)


def _prescriptions(rng: random.Random, part: str, layout: str) -> str:
    out = ["<h1>Prescriptions en cours</h1>"]
    for drug in rng.sample(DRUGS[part], 4):
        dose = f"{rng.choice((250, 500, 1000))} mg, {rng.randint(1, 3)} fois par jour"
        out.append(f"<div class='card'><h2>{drug}</h2><p>{dose}</p><div class='bar'>"
                   f"{ctl('button', 'Modifier', drug)}{ctl('button', 'Arrêter', drug)}"
                   "</div></div>")
    out.append(f"<div class='bar'>{ctl('button', 'Nouvelle prescription', cls='primary')}</div>")
    return "".join(out)


BODIES = {"patients": _patients, "labo": _labo, "form": _form, "dialog": _form,
          "inbox": _inbox, "prescriptions": _prescriptions}
