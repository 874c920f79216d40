"""A small labelled set of short synthetic documents (text as extraction would give it), five
types in English, Norwegian, German and Chinese, written independently of the classifier's
cue lists: the offline classifier's accuracy is measured on it."""

from __future__ import annotations

LABELLED: list[tuple[str, str]] = [
    # --- receipts
    (
        "receipt",
        """REMA 1000 Majorstuen
Org.nr 987 654 321 MVA
12.03.2026 17:42
Melk lett 1 l          21,90
Brød grovt             34,50
Bananer 0,8 kg         19,12
Totalt NOK             75,52
Herav MVA 15%           9,85
Bankkort              75,52
Takk for handelen!""",
    ),
    (
        "receipt",
        """Café Lune
Table 4 - Server: Maria
2 x Cappuccino        9.00
1 x Croissant         3.20
Total                EUR 12.20
Paid with Mastercard
Have a lovely day""",
    ),
    (
        "receipt",
        """EDEKA Müller
Filiale Hamburg-Altona
Datum: 03.02.2026 Uhrzeit 09:15
Vollmilch 1,5%        1,19 EUR
Roggenbrot            2,49 EUR
Summe EUR             3,68
MwSt 7%               0,24
Gegeben Bar           5,00
Zurück                1,32""",
    ),
    (
        "receipt",
        """Narvesen Oslo S
Kvittering nr 4411
Kaffe stor      39,00
Bolle           32,00
Sum             71,00 kr
Betalt med Vipps
MVA 15 %  9,26""",
    ),
    (
        "receipt",
        """全家便利店 FamilyMart
2026年3月5日 08:31
矿泉水 2 x 3.00
面包 6.50
合计 ¥12.50
现金 20.00 找零 7.50""",
    ),
    # --- invoices
    (
        "invoice",
        """Acme Consulting AS
Org.nr 912 345 678 MVA
Faktura
Fakturanummer: 2026-117
Fakturadato: 01.03.2026
Forfallsdato: 15.03.2026
Kunde: Nordlys Design AS
Rådgivning, 10 timer      12 500,00
MVA 25 %                   3 125,00
Å betale NOK              15 625,00
Kontonummer 1234.56.78901  KID 00011170""",
    ),
    (
        "invoice",
        """Brightline Software Ltd
INVOICE #INV-0042
Date of issue: 4 March 2026
Payment due: 3 April 2026
Billed to: Harbour Analytics Ltd
Annual licence              1,200.00
VAT 20%                       240.00
Amount due           GBP 1,440.00
VAT reg no GB123456789""",
    ),
    (
        "invoice",
        """Schreinerei Holzmann GmbH
Rechnung Nr. R-2026-031
Rechnungsdatum: 10. März 2026
Zahlbar bis 24.03.2026 ohne Abzug
Einbauschrank Eiche           2.100,00 €
zzgl. MwSt 19%                  399,00 €
Gesamtbetrag                  2.499,00 €
USt-IdNr. DE123456789
IBAN DE02 1203 0000 0000 2020 51""",
    ),
    (
        "invoice",
        """Stormfjord Elektro
Faktura 88213
Dato 2026-02-20
Betalingsfrist: 14 dager
Montering av lader       6 400,00
mva                      1 600,00
Totalt å betale kr       8 000,00""",
    ),
    (
        "invoice",
        """上海云帆科技有限公司
增值税发票
发票号码 No. 04521987
开票日期 2026年2月18日
服务费 8000.00
税额 480.00
合计 ¥8480.00""",
    ),
    # --- flight tickets
    (
        "flight_ticket",
        """SAS Boarding Pass
Passenger: HANSEN/KARI MS
Flight SK 4035  Oslo (OSL) → Bergen (BGO)
Date 14 March 2026  Departs 07:05  Arrives 07:55
Gate B12  Seat 14C  Boarding 06:35
Booking reference: X7K2QP""",
    ),
    (
        "flight_ticket",
        """Norwegian Air Shuttle
Reiserute / e-billett
Passasjer: Ola Nordmann
Bestillingsreferanse: HJ5KLM
DY1302 TRD-OSL 22.04.2026 avgang 10:20 ankomst 11:15
Bagasje: 1 kolli inkludert""",
    ),
    (
        "flight_ticket",
        """Lufthansa
Ihr Flugticket
Passagier: Herr Jonas Becker
Buchungscode: LH8QWE
LH 2471  München (MUC) - London Heathrow (LHR)
Abflug 05.05.2026 13:40  Ankunft 14:45
Sitzplatz 22A""",
    ),
    (
        "flight_ticket",
        """Your trip itinerary
Traveller: Emily Carter
Confirmation code: ZP9XTR
BA 762 LHR to OSL, 12 June 2026, 08:10 - 11:15
Cabin: Economy, 1 checked bag""",
    ),
    (
        "flight_ticket",
        """中国国际航空 登机牌
旅客 ZHANG/WEI
航班 CA 1501 北京 (PEK) - 上海 (SHA)
2026年4月2日 起飞 09:00
座位 32K 登机口 C18""",
    ),
    # --- order confirmations
    (
        "order_confirmation",
        """Thanks for shopping with Nordic Outdoor!
We've received your order #NO-55120 placed on 2 March 2026.
Trail running shoes, size 42     1 x 1 299,00 NOK
Merino socks                     2 x 149,00 NOK
Total: NOK 1 597,00
Estimated delivery: 6-8 March 2026 with Posten""",
    ),
    (
        "order_confirmation",
        """Komplett.no
Ordrebekreftelse
Ordrenummer: 201188734
Dato: 18.02.2026
Logitech MX Master 3S     1 190,00
Frakt                        49,00
Sum inkl. mva             1 239,00 kr
Leveres til: Storgata 1, 0155 Oslo""",
    ),
    (
        "order_confirmation",
        """Zalando
Vielen Dank für deine Bestellung!
Bestellnummer: 10203040506
Bestelldatum: 11.03.2026
Sneaker weiß Gr. 43         89,95 €
Gesamt                      89,95 €
Voraussichtliche Lieferung: 14.03.2026 - 16.03.2026""",
    ),
    (
        "order_confirmation",
        """Hello Sam,
your purchase is confirmed. Order ID: 113-4455667-8899001
Ordered on March 9, 2026
USB-C hub x1 $34.99
Order total: $34.99
Arriving Thursday, March 12 - shipped via UPS, tracking available soon""",
    ),
    (
        "order_confirmation",
        """京东 订单确认
订单号: 2026030988123
下单时间 2026年3月9日
蓝牙耳机 x1 ¥299.00
应付总额 ¥299.00
预计送达 3月11日""",
    ),
    # --- other
    (
        "other",
        """Minutes of the board meeting
Attendees: Kari, Jonas, Emily
1. The budget for the spring campaign was approved.
2. The next meeting is set for 14 April 2026.""",
    ),
    (
        "other",
        """Oppskrift: Fiskesuppe
Ingredienser: torsk, laks, gulrot, purre, fløte.
Kok kraften i 20 minutter og tilsett fisken til slutt.""",
    ),
    (
        "other",
        """Bedienungsanleitung Kaffeemaschine
Füllen Sie den Wassertank bis zur Markierung.
Drücken Sie die Taste zweimal für einen doppelten Espresso.""",
    ),
    (
        "other",
        """Chapter 3: The Rise of the Hanseatic League
Merchants from Lübeck and Bergen traded stockfish, grain and cloth across the Baltic.""",
    ),
    (
        "other",
        """Project README
This tool converts Markdown notes to HTML.
Install it with pip and run it from the command line.""",
    ),
    (
        "other",
        """Lease agreement for the apartment at Storgata 5
The tenant pays the rent on the first day of each month.
The deposit equals three months' rent.""",
    ),
]
