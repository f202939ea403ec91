"""A fixed corpus for measuring token estimators against a real tokenizer.

Written for cogmesh: prose, several languages and scripts, source code and
structured data in the proportions a system prompt and a transcript hold.
The figures quoted in ``services.lib.tokens`` are measured on it
(``python -m services.lib.tokens``) and tests/unit/test_tokens.py holds the
estimators to them, so a change of estimator or corpus shows up in the numbers.
"""

from __future__ import annotations

CORPUS: dict[str, tuple[str, ...]] = {
    "english_prose": (
        "The support team rotates on-call duty every week. Whoever holds the pager answers incidents "
        "within fifteen minutes, writes a short timeline while the incident is open, and hands over "
        "unfinished work at the Monday meeting with a list of follow-up tasks and their owners.",
        "You are a careful assistant. Answer the user's question directly, cite the tool results you "
        "relied on, and say plainly when you do not know something instead of guessing. Keep answers "
        "short unless the user asks for detail; prefer lists for steps and tables for comparisons.",
        "Yesterday's release moved the billing export from a nightly batch to a stream of events. "
        "Finance noticed that refunds issued after midnight now appear on the correct day, which "
        "removes the manual adjustment they had been making at the end of every month since spring.",
    ),
    "german": (
        "Die Lieferung verzögert sich um zwei Tage, weil das Lager in Leipzig wegen einer "
        "Inventur geschlossen ist. Wir bitten um Entschuldigung und erstatten die Versandkosten.",
        "Bitte prüfen Sie vor der Überweisung die Kontonummer des Empfängers sorgfältig; "
        "Rückbuchungen sind nur innerhalb von acht Wochen und mit Zustimmung der Bank möglich.",
    ),
    "french": (
        "Le rendez-vous de jeudi est déplacé à vendredi matin, neuf heures et demie. Merci de "
        "confirmer votre présence et d'apporter les documents signés lors de notre dernier échange.",
        "Les économies réalisées sur l'énergie financeront la rénovation de l'école primaire, "
        "dont la toiture laisse passer l'eau depuis l'hiver dernier.",
    ),
    "spanish": (
        "Para abrir una cuenta de ahorro necesitas tu documento de identidad, un comprobante de "
        "domicilio reciente y un depósito inicial mínimo de cincuenta euros.",
        "La biblioteca municipal amplía su horario durante los exámenes: abrirá de ocho de la "
        "mañana a once de la noche, incluidos los fines de semana.",
    ),
    "russian": (
        "Чтобы открыть вклад, выберите срок и сумму, затем подтвердите условия в приложении банка. "
        "Проценты начисляются ежемесячно и могут добавляться к сумме вклада.",
        "Вчера вечером в городе прошёл сильный дождь, и несколько улиц в центре были перекрыты "
        "до утра, пока коммунальные службы откачивали воду.",
    ),
    "chinese": (
        "请在下单前确认收货地址和联系电话，订单提交后将无法修改。如需帮助，请联系在线客服，我们会在工作时间内尽快回复。",
        "这款应用可以帮助用户记录每天的支出，并按类别生成月度报表，方便比较不同月份的消费习惯。",
    ),
    "japanese": (
        "明日の会議は午後二時から第三会議室で行います。資料は前日までに共有フォルダへアップロードしてください。",
        "このアプリでは、毎日の歩数と睡眠時間を記録し、週ごとの傾向をグラフで確認できます。",
    ),
    "arabic": (
        "يرجى تأكيد موعد التسليم قبل نهاية الأسبوع، وإرسال نسخة موقعة من العقد إلى قسم المشتريات.",
        "تقدم المكتبة العامة دورات مجانية في البرمجة للطلاب خلال العطلة الصيفية.",
    ),
    "python_code": (
        "def moving_average(values: list[float], window: int) -> list[float]:\n"
        "    if window <= 0:\n"
        '        raise ValueError("window must be positive")\n'
        "    total = sum(values[:window])\n"
        "    out = [total / window]\n"
        "    for i in range(window, len(values)):\n"
        "        total += values[i] - values[i - window]\n"
        "        out.append(total / window)\n"
        "    return out\n",
        "class RetryPolicy:\n"
        "    def __init__(self, attempts: int = 3, backoff_s: float = 0.5) -> None:\n"
        "        self.attempts = attempts\n"
        "        self.backoff_s = backoff_s\n\n"
        "    async def run(self, call):\n"
        "        for attempt in range(self.attempts):\n"
        "            try:\n"
        "                return await call()\n"
        "            except ConnectionError:\n"
        "                await asyncio.sleep(self.backoff_s * 2**attempt)\n"
        "        raise TimeoutError(f'gave up after {self.attempts} attempts')\n",
    ),
    "typescript_code": (
        "export async function fetchOrders(userId: string, page = 1): Promise<Order[]> {\n"
        "  const res = await fetch(`/api/users/${userId}/orders?page=${page}`);\n"
        "  if (!res.ok) throw new Error(`orders: HTTP ${res.status}`);\n"
        "  const body = (await res.json()) as { orders: Order[] };\n"
        "  return body.orders.filter((o) => o.status !== 'cancelled');\n"
        "}\n",
    ),
    "json": (
        '{"id": "ord_48213", "status": "shipped", "items": [{"sku": "KB-104", "qty": 2, '
        '"price": 49.9}, {"sku": "MS-22", "qty": 1, "price": 19.5}], "total": 119.3, '
        '"shipped_at": "2025-03-14T09:26:53Z", "carrier": {"name": "DHL", "tracking": "JD014600003"}}',
        '{"temperature_c": 21.4, "humidity": 0.52, "readings": [21.1, 21.3, 21.4, 21.6], '
        '"sensor": {"id": "s-17", "room": "lab-2", "calibrated": true}}',
    ),
    "markdown_and_logs": (
        "## Deployment checklist\n\n- [ ] Run the migrations on staging\n- [ ] Check the error rate "
        "dashboard for 30 minutes\n- [x] Announce the window in #ops\n\n| service | replicas |\n"
        "|---|---|\n| gateway | 3 |\n| runtime | 6 |\n",
        "2025-03-14T09:26:53.120Z INFO  gateway request_id=7f3a9c method=SendMessage latency_ms=12.4\n"
        "2025-03-14T09:26:53.377Z WARN  runtime retrying provider call attempt=2 status=429\n"
        "2025-03-14T09:26:54.002Z ERROR sessions lease expired session=s_91b2 turn=t_0c77\n",
    ),
}


def samples() -> list[tuple[str, str]]:
    """(category, text) pairs in a fixed order."""
    return [(category, text) for category, texts in CORPUS.items() for text in texts]
