"""The memory inspector (/ui) in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven by Selenium against a real `kvmem serve` with two API keys. The page asks
for the key, creates a memart agent, chats two turns, and shows the cached spans of its memory and
the blocks the second turn recalled, with no console error; a screenshot is written to
build/artifacts/inspector.png. The JSON endpoints the page reads are checked with plain HTTP too:
tenant-scoped, 404 for unknown agents, the page itself open and locked down by its CSP."""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = os.environ.get(
    "KVMEM_ARTIFACTS", os.path.join(os.path.dirname(os.path.abspath(server_util.BIN)), "..", "artifacts"))
WAIT_S = 120  # two turns of SmolLM2 on two threads, with room for a slow CI machine


def skip_without_browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        print("SKIP: " + ", ".join(missing) + " missing (apt-get install chromium chromium-driver)")
        sys.exit(0)


def start_browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def severe(driver):
    """The browser's SEVERE console entries since the last call (reading the log clears it)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


class InspectorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        skip_without_browser()
        cls.store = tempfile.TemporaryDirectory()
        cls.srv = server_util.Server(cls.store.name,
                                     extra=["--api-key", "key-a:alice", "--api-key", "key-b:bob"])
        status, _ = cls.srv.post_json("/v1/agents", {"id": "bob-secret"},
                                      {"Authorization": "Bearer key-b"})
        assert status == 200, status
        cls.driver = start_browser()

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.srv.stop()
        cls.store.cleanup()

    def get(self, path, key):
        status, text = self.srv.get(path, {"Authorization": "Bearer " + key} if key else {})
        return status, json.loads(text) if text.startswith("{") else text

    def test_1_api(self):
        status, page = self.srv.get("/ui")
        self.assertEqual(status, 200)
        self.assertIn('<script src="/ui/app.js"', page)
        self.assertEqual(self.srv.get("/ui/app.js")[0], 200)
        self.assertEqual(self.srv.get("/ui/nothing.js")[0], 404)
        self.assertEqual(self.srv.get("/ui/../v1/agents")[0], 404)
        status, err = self.get("/v1/agents/bob-secret/memory", None)
        self.assertEqual(status, 401)
        # Another tenant's agent does not exist for this key.
        for what in ("memory", "turns"):
            status, err = self.get("/v1/agents/bob-secret/" + what, "key-a")
            self.assertEqual(status, 404, err)
            self.assertIn("no agent 'bob-secret'", err["error"]["message"])
            status, body = self.get("/v1/agents/bob-secret/" + what, "key-b")
            self.assertEqual(status, 200, body)
        status, memory = self.get("/v1/agents/bob-secret/memory", "key-b")
        self.assertEqual((memory["object"], memory["policy"], memory["text"], memory["cached"]),
                         ("agent.memory", "full", "", []))
        status, turns = self.get("/v1/agents/bob-secret/turns", "key-b")
        self.assertEqual((turns["object"], turns["data"]), ("list", []))
        self.assertEqual(self.get("/v1/agents/nobody/memory", "key-a")[0], 404)
        self.assertEqual(self.get("/v1/agents/a%zz/turns", "key-a")[0], 400)
        self.assertEqual(self.get("/v1/agents/x/other", "key-a")[0], 404)

    def test_2_browser(self):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as EC
        from selenium.webdriver.support.ui import Select, WebDriverWait
        d = self.driver
        wait = WebDriverWait(d, WAIT_S)
        d.get(self.srv.url + "/ui")
        # Without a key the page asks for one; the refused calls are the only console errors.
        wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "needs an API key"))
        for entry in severe(d):
            self.assertIn("401", entry["message"], entry)
        d.find_element(By.ID, "api-key").send_keys("key-a")
        d.find_element(By.CSS_SELECTOR, "#key-form button").click()
        wait.until(lambda _: len(Select(d.find_element(By.ID, "new-policy")).options) > 1)

        # A memart agent retrieving per layer (the paper's way) over small blocks, so the second
        # turn chooses among the first turn's blocks, each layer its own.
        d.find_element(By.ID, "new-id").send_keys("ada <b>&amp;</b>")
        Select(d.find_element(By.ID, "new-policy")).select_by_value("memart")
        d.find_element(By.ID, "new-config").send_keys('{"preset": "paper", "block_size": 16, "top_k": 2}')
        d.find_element(By.CSS_SELECTOR, "#create-form button").click()
        wait.until(EC.text_to_be_present_in_element((By.ID, "agent-title"), "ada <b>&amp;</b>"))
        self.assertIn("memart", d.find_element(By.ID, "agent-summary").text)

        def chat(text, n_turns):
            box = d.find_element(By.ID, "chat-input")
            box.send_keys(text)
            d.find_element(By.ID, "chat-send").click()
            wait.until(lambda _: len(d.find_elements(By.CSS_SELECTOR, "#turns .turn")) == n_turns)
            wait.until(lambda _: d.find_element(By.ID, "chat-send").is_enabled())
            replies = d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")
            self.assertEqual(len(replies), n_turns)
            self.assertTrue(replies[-1].text.strip(), "empty streamed reply")

        chat("My locker code is 4512 and my cat is called Miso. Say ok.", 1)
        cached = lambda: "".join(s.text for s in d.find_elements(By.CSS_SELECTOR, "#memory-text .cached"))
        self.assertIn("4512", cached())
        self.assertIn("block", d.find_element(By.ID, "memory-summary").text)
        self.assertEqual(d.find_elements(By.CSS_SELECTOR, ".recalled-block"), [])

        chat("What is my locker code?", 2)
        self.assertIn("What is my locker code?", cached())
        newest = d.find_elements(By.CSS_SELECTOR, "#turns .turn")[0]
        rows = newest.find_elements(By.CSS_SELECTOR, ".recalled-block")
        self.assertGreater(len(rows), 0, "no recalled block shown for the second turn")
        # Each recalled block: its text, and a rank (or "k": always kept) for every layer.
        strip = rows[0].find_elements(By.CSS_SELECTOR, ".ranks span")
        self.assertEqual(len(strip), 30)  # SmolLM2-135M's layers
        self.assertTrue(all(s.text == "k" or s.text.isdigit() for s in strip))
        self.assertTrue(any(r.find_elements(By.CSS_SELECTOR, ".ranks span.read") for r in rows))
        self.assertTrue(rows[0].find_element(By.CSS_SELECTOR, ".snippet").text.strip())

        # The list shows this tenant's agents only; the markup in the id stayed text.
        table = d.find_element(By.ID, "agents").text
        self.assertIn("ada <b>&amp;</b>", table)
        self.assertNotIn("bob-secret", table)
        self.assertEqual(d.find_elements(By.CSS_SELECTOR, "#agents b"), [])

        # /metrics at a glance: a chart line once two samples saw the generated tokens.
        wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, "#metric-chart polyline"))

        os.makedirs(ARTIFACTS, exist_ok=True)
        d.save_screenshot(os.path.join(ARTIFACTS, "inspector.png"))
        self.assertEqual(severe(d), [])

        # What the page showed is the API's: the same memory and turns through curl's door.
        status, memory = self.get("/v1/agents/ada%20%3Cb%3E%26amp%3B%3C%2Fb%3E/memory", "key-a")
        self.assertEqual(status, 200, memory)
        self.assertIn("4512", memory["text"])
        self.assertTrue(all(p["kind"] == "block" for p in memory["parts"]))
        status, turns = self.get("/v1/agents/ada%20%3Cb%3E%26amp%3B%3C%2Fb%3E/turns", "key-a")
        self.assertEqual([t["turn"] for t in turns["data"]], [1, 2])
        ranks = turns["data"][1]["detail"]["ranks"]
        self.assertTrue(ranks and all(len(r["ranks"]) == 30 for r in ranks))


if __name__ == "__main__":
    unittest.main()
