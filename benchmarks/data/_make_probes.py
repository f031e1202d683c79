# ruff: noqa: E501  (one probe per line reads best)
# fmt: off
"""Writes probes.jsonl: hand-written contradiction and paraphrase probes (see benchmarks/README.md).

Each probe: a question, its documents, an answer, and which of the answer's sentences are false
("false_sentences"; empty for a faithful answer). Every third probe (in file order, so every kind) is held
out: never used to choose prompts, thresholds or rules; reported separately.

    python benchmarks/data/_make_probes.py     # regenerates probes.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

# (kind, question, documents, answer, false sentence or None (= the whole answer is false))
C = [
    # --- a swapped day -------------------------------------------------------------------------------------
    ("swapped_day", "When is the meeting?", ["The quarterly meeting is held on Tuesday in room 4."],
     "The quarterly meeting is held on Friday."),
    ("swapped_day", "When does the pharmacy close early?", ["The pharmacy closes at 2 pm on Saturdays and is open until 8 pm on weekdays."],
     "The pharmacy closes at 2 pm on Sundays."),
    ("swapped_day", "When is garbage collected?", ["Garbage is collected every Monday morning. Recycling is collected on Thursday."],
     "Garbage is collected every Wednesday morning."),
    ("swapped_day", "When was the treaty signed?", ["The treaty was signed on 14 March 1921 in Riga."],
     "The treaty was signed on 14 May 1921 in Riga."),
    ("swapped_day", "When is the museum free?", ["Entry to the museum is free on the first Sunday of each month."],
     "Entry to the museum is free on the first Saturday of each month."),
    ("swapped_day", "When do the updates ship?", ["Security updates are released on the second Tuesday of every month."],
     "Security updates are released on the second Thursday of every month."),
    # --- a swapped number ----------------------------------------------------------------------------------
    ("swapped_number", "How long is the warranty?", ["The battery is covered by a 2-year warranty. A full charge takes about 4 hours."],
     "The battery is covered by a 4-year warranty."),
    ("swapped_number", "How many rooms does the hotel have?", ["The hotel has 120 rooms and two restaurants."],
     "The hotel has 210 rooms."),
    ("swapped_number", "What is the deposit?", ["Tenants pay a deposit of 1,500 euros before moving in."],
     "Tenants pay a deposit of 1,800 euros before moving in."),
    ("swapped_number", "How many players are on a team?", ["Each volleyball team has six players on the court."],
     "Each volleyball team has seven players on the court."),
    ("swapped_number", "What is the speed limit?", ["The speed limit in residential streets is 30 km/h."],
     "The speed limit in residential streets is 50 km/h."),
    ("swapped_number", "How many employees?", ["The company employs about 3,400 people in 12 countries."],
     "The company employs about 3,400 people in 21 countries."),
    ("swapped_number", "What is the interest rate?", ["The savings account pays 2.5% interest per year."],
     "The savings account pays 3.5% interest per year."),
    # --- a swapped name ------------------------------------------------------------------------------------
    ("swapped_name", "Who founded the company?", ["Acme Robotics was founded by Maria Lopez in 2009. Its chief engineer is Tom Hale."],
     "Acme Robotics was founded by Tom Hale in 2009."),
    ("swapped_name", "Where is the headquarters?", ["The headquarters of Nordvik Shipping is in Bergen. It has a branch office in Oslo."],
     "The headquarters of Nordvik Shipping is in Oslo."),
    ("swapped_name", "Who wrote the novel?", ["The novel 'Quiet Harbour' was written by Ellen Marsh and illustrated by David Kim."],
     "The novel 'Quiet Harbour' was written by David Kim."),
    ("swapped_name", "Which river flows through the city?", ["The city of Lindau lies on Lake Constance; the river Rhine flows into the lake nearby."],
     "The river Danube flows into the lake near Lindau."),
    ("swapped_name", "Which database does the service use?", ["The billing service stores invoices in PostgreSQL and caches sessions in Redis."],
     "The billing service stores invoices in Redis."),
    ("swapped_name", "Who won the award?", ["The 2022 design award went to the Kyoto studio Hanare; the Lisbon studio Casa Azul was runner-up."],
     "The 2022 design award went to the Lisbon studio Casa Azul."),
    # --- a role swap, in the documents' own words ----------------------------------------------------------
    ("role_swap", "Who pays whom?", ["Under the lease, the tenant pays the landlord a monthly rent."],
     "Under the lease, the landlord pays the tenant a monthly rent."),
    ("role_swap", "Who reports to whom?", ["The project manager reports to the head of engineering."],
     "The head of engineering reports to the project manager."),
    ("role_swap", "Who acquired whom?", ["In 2018 Brightline acquired Corvex for 40 million dollars."],
     "In 2018 Corvex acquired Brightline for 40 million dollars."),
    ("role_swap", "What does the client send?", ["The client sends a request to the server, and the server returns a token."],
     "The server sends a request to the client, and the client returns a token."),
    ("role_swap", "Who trains whom?", ["Senior nurses train the new interns during their first month."],
     "The new interns train senior nurses during their first month."),
    ("role_swap", "Which team beat which?", ["In the final, Porto beat Lyon 3-1."],
     "In the final, Lyon beat Porto 3-1."),
    # --- a negation ----------------------------------------------------------------------------------------
    ("negation", "Can I return sale items?", ["Sale items cannot be returned or exchanged."],
     "Sale items can be returned or exchanged."),
    ("negation", "Is breakfast included?", ["Breakfast is included in the room rate."],
     "Breakfast is not included in the room rate."),
    ("negation", "Does the app work offline?", ["The app does not work without an internet connection."],
     "The app works without an internet connection."),
    ("negation", "Is the trail open in winter?", ["The upper trail is closed from December to March."],
     "The upper trail is open from December to March."),
    ("negation", "Do I need a visa?", ["Citizens of the EU need no visa for stays of up to 90 days."],
     "Citizens of the EU need a visa for stays of up to 90 days."),
    ("negation", "Is the drug safe in pregnancy?", ["The drug should never be taken during pregnancy."],
     "The drug can be taken during pregnancy."),
    ("negation", "Are pets allowed?", ["Pets are allowed in the garden but not inside the restaurant."],
     "Pets are allowed inside the restaurant."),
    # --- the opposite of a fact stated in another sentence --------------------------------------------------
    ("opposite_other_sentence", "Is the library open on Sunday?", ["The library is open Monday to Saturday from 9 am to 6 pm. On Sundays it is closed."],
     "The library is open on Sundays."),
    ("opposite_other_sentence", "Does the plan include support?", ["The Basic plan costs 10 dollars per month. Phone support is only available on the Premium plan."],
     "The Basic plan includes phone support."),
    ("opposite_other_sentence", "Is the water drinkable?", ["The village gets its water from a mountain spring. The tap water must be boiled before drinking."],
     "The tap water in the village is safe to drink without boiling."),
    ("opposite_other_sentence", "Did sales grow?", ["Revenue rose in the first quarter. In the second quarter revenue fell by 8 percent."],
     "Revenue rose in the second quarter."),
    ("opposite_other_sentence", "Is parking free?", ["The hotel is near the station. Guests pay 15 euros per night for parking."],
     "Parking is free for hotel guests."),
    ("opposite_other_sentence", "Was the launch a success?", ["The rocket lifted off on schedule. Two minutes later it exploded and the payload was lost."],
     "The payload reached orbit."),
    # --- quantities and units ------------------------------------------------------------------------------
    ("quantity_unit", "How heavy is the bike?", ["The folding bike weighs 12 kg."],
     "The folding bike weighs 12 pounds."),
    ("quantity_unit", "How long is the trail?", ["The coastal trail is 8 kilometres long."],
     "The coastal trail is 8 miles long."),
    ("quantity_unit", "How much water per day?", ["Adults should drink about 2 litres of water a day."],
     "Adults should drink about 2 gallons of water a day."),
    ("quantity_unit", "How much storage?", ["The free tier includes 5 GB of storage."],
     "The free tier includes 5 TB of storage."),
    ("quantity_unit", "How much does it cost?", ["A single ticket costs 3 euros."],
     "A single ticket costs 30 euros."),
    ("quantity_unit", "What is the dose?", ["The usual dose is 500 mg twice a day."],
     "The usual dose is 500 mg four times a day."),
    # --- time spans ----------------------------------------------------------------------------------------
    ("time_span", "How long does delivery take?", ["Standard delivery takes 3 to 5 business days."],
     "Standard delivery takes 3 to 5 weeks."),
    ("time_span", "How long is the trial?", ["The free trial lasts 14 days."],
     "The free trial lasts 14 months."),
    ("time_span", "How long does a charge take?", ["A full charge takes about 4 hours."],
     "A full charge takes about 40 minutes."),
    ("time_span", "How long are passwords valid?", ["Passwords expire after 90 days."],
     "Passwords expire after 90 minutes."),
    ("time_span", "How long did the war last?", ["The war lasted from 1618 to 1648."],
     "The war lasted ten years."),
    ("time_span", "When do refunds arrive?", ["Refunds are paid within 10 days of the return."],
     "Refunds are paid within 10 hours of the return."),
    # --- comparatives --------------------------------------------------------------------------------------
    ("comparative", "Which model is lighter?", ["The X200 weighs 1.1 kg and the X300 weighs 1.4 kg."],
     "The X300 is lighter than the X200."),
    ("comparative", "Which city is larger?", ["Porto has about 230,000 inhabitants; Braga has about 190,000."],
     "Braga is larger than Porto."),
    ("comparative", "Which plan is cheaper?", ["The annual plan is cheaper than paying monthly."],
     "Paying monthly is cheaper than the annual plan."),
    ("comparative", "Is the new engine more efficient?", ["The new engine uses 20 percent less fuel than the old one."],
     "The new engine uses more fuel than the old one."),
    ("comparative", "Who is older?", ["Anna was born in 1990 and her brother Paul in 1985."],
     "Anna is older than Paul."),
    ("comparative", "Which route is faster?", ["The coastal route takes 3 hours, while the mountain route takes 5 hours."],
     "The mountain route is faster than the coastal route."),
    # --- attributes swapped between two entities ------------------------------------------------------------
    ("attribute_swap", "What colours are the cars?", ["The sedan is red and the van is blue."],
     "The sedan is blue."),
    ("attribute_swap", "Where do the siblings live?", ["Clara lives in Vienna and her sister Ruth lives in Graz."],
     "Clara lives in Graz."),
    ("attribute_swap", "What do the libraries handle?", ["The requests library handles HTTP calls, while pandas handles data tables."],
     "The requests library handles data tables."),
    ("attribute_swap", "What are the prices?", ["The small pizza costs 8 euros and the large pizza costs 12 euros."],
     "The small pizza costs 12 euros."),
    ("attribute_swap", "Which port is for what?", ["Port 80 serves HTTP and port 443 serves HTTPS."],
     "Port 80 serves HTTPS."),
    ("attribute_swap", "Who teaches which subject?", ["Mr Olsen teaches chemistry and Ms Berg teaches history."],
     "Ms Berg teaches chemistry."),
    # --- one contradicted sentence inside an otherwise faithful answer ---------------------------------------
    ("multi_sentence", "Tell me about the e-bike.", ["The e-bike has a range of 80 km. A full charge takes about 4 hours. The battery is covered by a 2-year warranty."],
     "The e-bike has a range of 80 km. A full charge takes about 4 hours. The battery is covered by a 5-year warranty.",
     "The battery is covered by a 5-year warranty."),
    ("multi_sentence", "What are the hotel's facilities?", ["The hotel has an indoor pool. The restaurant serves breakfast from 7 to 10 am. The gym is open 24 hours."],
     "The hotel has an indoor pool. The restaurant serves breakfast from 7 to 10 am. The gym closes at midnight.",
     "The gym closes at midnight."),
    ("multi_sentence", "Summarise the policy.", ["Employees get 25 days of paid leave. Unused days expire at the end of March. Sick leave does not count against paid leave."],
     "Employees get 25 days of paid leave. Unused days can be carried over indefinitely. Sick leave does not count against paid leave.",
     "Unused days can be carried over indefinitely."),
    ("multi_sentence", "How do I install the tool?", ["Install the tool with pip. It requires Python 3.10 or newer. Configuration lives in a TOML file."],
     "Install the tool with pip. It requires Python 3.8 or newer. Configuration lives in a TOML file.",
     "It requires Python 3.8 or newer."),
    ("multi_sentence", "Tell me about the bridge.", ["The bridge opened in 1932. It is 503 metres long. It was designed by the engineer John Bradfield."],
     "The bridge opened in 1932. It is 503 metres long. It was designed by the engineer Ralph Freeman.",
     "It was designed by the engineer Ralph Freeman."),
    ("multi_sentence", "What does the course cover?", ["The course covers statistics and linear algebra. It runs for ten weeks. There is no final exam."],
     "The course covers statistics and linear algebra. It runs for ten weeks. It ends with a final exam.",
     "It ends with a final exam."),
]

F = [
    # --- synonyms ------------------------------------------------------------------------------------------
    ("synonym", "What does the drug do?", ["The drug reduces blood pressure in adults."], "The drug lowers blood pressure in adults."),
    ("synonym", "When is the office open?", ["The office is open Monday to Friday."], "The office is open on weekdays."),
    ("synonym", "What happened to the price?", ["The company increased the price of the subscription."], "The company raised the subscription price."),
    ("synonym", "How fast is the car?", ["The car is very fast on highways."], "The car is very quick on highways."),
    ("synonym", "What must visitors do?", ["Visitors must show a valid ID at the entrance."], "Visitors are required to present a valid ID at the entrance."),
    ("synonym", "What did the mayor do?", ["The mayor resigned in June."], "The mayor stepped down in June."),
    ("synonym", "Is the product cheap?", ["The product is inexpensive."], "The product is cheap."),
    ("synonym", "What does the filter remove?", ["The filter removes most bacteria from the water."], "The filter eliminates most bacteria from the water."),
    # --- reordering ----------------------------------------------------------------------------------------
    ("reordering", "When is the meeting?", ["The quarterly meeting is held on Tuesday in room 4."], "On Tuesday, the quarterly meeting is held in room 4."),
    ("reordering", "Who wrote it?", ["The report was written by the audit team."], "The audit team wrote the report."),
    ("reordering", "What about the museum?", ["Entry to the museum is free on the first Sunday of each month."], "On the first Sunday of each month, museum entry is free."),
    ("reordering", "Who acquired whom?", ["In 2018 Brightline acquired Corvex for 40 million dollars."], "Corvex was acquired by Brightline in 2018."),
    ("reordering", "How is the tool installed?", ["You can install the tool with pip."], "With pip you can install the tool."),
    ("reordering", "Who trains the interns?", ["Senior nurses train the new interns during their first month."], "During their first month, the new interns are trained by senior nurses."),
    # --- number formats ------------------------------------------------------------------------------------
    ("number_format", "How many users?", ["The service has 10,000 active users."], "The service has 10000 active users."),
    ("number_format", "How many users?", ["The service has 10,000 active users."], "The service has 10 000 active users."),
    ("number_format", "What is the rate?", ["The savings account pays 5 % interest per year."], "The savings account pays 5 percent interest per year."),
    ("number_format", "How many players?", ["Each volleyball team has six players on the court."], "Each volleyball team has 6 players on the court."),
    ("number_format", "How far is it?", ["The coastal trail is 8 km long."], "The coastal trail is 8 kilometres long."),
    ("number_format", "What does it cost?", ["The licence costs $1,200 per year."], "The licence costs 1200 dollars per year."),
    ("number_format", "How many people?", ["The city has 2.5 million inhabitants."], "The city has 2,500,000 inhabitants."),
    ("number_format", "How long does a charge take?", ["A full charge takes about 4 hours."], "A full charge takes about four hours."),
    # --- two document sentences merged into one claim ------------------------------------------------------
    ("merged", "Tell me about the hotel.", ["The hotel has 120 rooms. It also has two restaurants."], "The hotel has 120 rooms and two restaurants."),
    ("merged", "Who founded Acme?", ["Acme Robotics was founded by Maria Lopez. The company was founded in 2009."], "Maria Lopez founded Acme Robotics in 2009."),
    ("merged", "What about the library?", ["The library opens at 9 am. It closes at 6 pm."], "The library is open from 9 am to 6 pm."),
    ("merged", "Tell me about the bridge.", ["The bridge opened in 1932. It is 503 metres long."], "The 503-metre bridge opened in 1932."),
    ("merged", "What about the course?", ["The course covers statistics. It also covers linear algebra."], "The course covers statistics and linear algebra."),
    ("merged", "What about the bike?", ["The folding bike weighs 12 kg. It has seven gears."], "The folding bike weighs 12 kg and has seven gears."),
    # --- faithful multi-sentence answers -------------------------------------------------------------------
    ("multi_faithful", "Tell me about the e-bike.", ["The e-bike has a range of 80 km. A full charge takes about 4 hours. The battery is covered by a 2-year warranty."],
     "The e-bike can travel 80 kilometres on one charge. Charging fully takes roughly four hours. The battery has a two-year warranty."),
    ("multi_faithful", "Summarise the policy.", ["Employees get 25 days of paid leave. Unused days expire at the end of March."],
     "Staff receive 25 days of paid leave. Any unused days expire at the end of March."),
    ("multi_faithful", "How do I install the tool?", ["Install the tool with pip. It requires Python 3.10 or newer."],
     "The tool is installed with pip. It needs Python 3.10 or later."),
    ("multi_faithful", "Which city is larger?", ["Porto has about 230,000 inhabitants; Braga has about 190,000."],
     "Porto is larger than Braga. Porto has about 230 000 inhabitants."),
]


def main() -> None:
    rows = []
    seen: dict[str, int] = {}
    for kind, question, docs, answer, *false in C:
        i = seen[kind] = seen.get(kind, -1) + 1
        rows.append({"id": f"c-{kind}-{i + 1}", "kind": kind, "label": "contradiction",
                     "split": "heldout" if len(rows) % 3 == 2 else "tune", "question": question,
                     "contexts": docs, "answer": answer, "false_sentences": [false[0] if false else answer]})
    for kind, question, docs, answer in F:
        i = seen[kind] = seen.get(kind, -1) + 1
        rows.append({"id": f"f-{kind}-{i + 1}", "kind": kind, "label": "faithful",
                     "split": "heldout" if len(rows) % 3 == 2 else "tune", "question": question,
                     "contexts": docs, "answer": answer, "false_sentences": []})
    out = Path(__file__).with_name("probes.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    n_c = sum(r["label"] == "contradiction" for r in rows)
    held = sum(r["split"] == "heldout" for r in rows)
    print(f"{len(rows)} probes: {n_c} contradictions, {len(rows) - n_c} faithful, {held} held out -> {out}")


if __name__ == "__main__":
    main()
