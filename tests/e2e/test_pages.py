"""A tour of every main page in Chromium, as a desktop (1366x900) and a phone (390x844) see it:
a screenshot of each (test-artifacts/screenshots/page-<name>-<width>.png), no horizontal
scrolling at 390 px, and not one Content-Security-Policy violation or console error, under the
policy the app itself sends (the real application under daphne: no test policy).

Also the rough edges a new user hits first: the skip link, visible focus, the theme picker
(before the first paint) and the copy button of a new API token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, ViewportSize, expect

from tests.e2e.conftest import SCREENSHOTS, PageProblems, Tour
from tests.e2e.helpers import login

pytestmark = pytest.mark.e2e

DESKTOP: ViewportSize = {"width": 1366, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}


@dataclass(frozen=True)
class Stop:
    name: str
    path: str
    heading: str  # the page's h1, to know it is the page we meant ("": it has none)


def stops(tour: Tour) -> dict[str | None, list[Stop]]:
    """The pages of the tour by who looks at them (None: a visitor)."""
    return {
        None: [
            Stop("login", "/accounts/login/", "Log in"),
            Stop("signup", "/accounts/signup/", "Create your account"),
            Stop("password-reset", "/accounts/password/reset/", "Forgot your password?"),
        ],
        tour.newcomer: [Stop("notebooks-empty", "/", "Your notebooks")],
        tour.username: [
            Stop("notebooks", "/", "Your notebooks"),
            Stop("notebook", f"/notebooks/{tour.notebook_id}/", "Tools and friends"),
            Stop("note", f"/notes/{tour.note_id}/", "Lantern notes"),
            Stop("note-edit", f"/notes/{tour.note_id}/edit/", ""),  # no h1 (reported)
            Stop("pdf-text", f"/attachments/{tour.attachment_id}/pages/", "manual.pdf"),
            Stop("chats", f"/notebooks/{tour.notebook_id}/chats/", "Conversations"),
            Stop("conversation", f"/chats/{tour.conversation_id}/", "What does lantern build"),
            Stop("search", f"/search/?q={tour.search_query.replace(' ', '+')}", "Search"),
            Stop("memories", f"/notebooks/{tour.notebook_id}/memories/", "Memory of"),
            Stop("share", f"/notebooks/{tour.notebook_id}/share/", "Share this notebook"),
            Stop("account-delete", "/settings/delete/", "Delete your account?"),
            Stop("settings", "/settings/", "Settings"),
            Stop("password", "/settings/password/", "Change password"),
            Stop("404", "/no-such-page/", "Page not found"),
        ],
    }


def overflow(page: Page) -> dict[str, Any]:
    """How wide the document is against the window, and which elements stick out."""
    sizes: dict[str, Any] = page.evaluate(
        """() => {
            const width = window.innerWidth;
            const wide = [];
            for (const el of document.querySelectorAll("body *")) {
                const box = el.getBoundingClientRect();
                if (box.width && box.right > width + 0.5) {
                    const name = `${el.tagName.toLowerCase()}.${el.className}`;
                wide.push(`${name} → ${Math.round(box.right)}`);
                }
            }
            return {
                scrollWidth: document.documentElement.scrollWidth,
                innerWidth: width,
                wide: wide.slice(0, 10),
            };
        }"""
    )
    return sizes


def visit(page: Page, stop: Stop, width: int, problems: PageProblems) -> None:
    response = page.goto(stop.path)
    assert response is not None
    expected_status = 404 if stop.name == "404" else 200
    assert response.status == expected_status, f"{stop.path} answered {response.status}"
    policy = response.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy, (stop.path, policy)
    assert "unsafe" not in policy, (stop.path, policy)
    if stop.heading:
        expect(page.get_by_role("heading", level=1).first).to_contain_text(stop.heading)
    page.wait_for_load_state("load")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"page-{stop.name}-{width}.png", full_page=True)
    if width <= PHONE["width"]:
        sizes = overflow(page)
        assert sizes["scrollWidth"] <= sizes["innerWidth"], (stop.name, sizes)
    # A 404 is the page's own answer, not a problem; any other report is.
    found = [p for p in problems.take() if not (stop.name == "404" and "404" in p)]
    assert found == [], (stop.name, width, found)


def test_every_main_page_at_desktop_and_phone_width(
    tour: Tour, site_context: BrowserContext, site_page: Page, site_problems: PageProblems
) -> None:
    # `tour` first: its data (and the embedding model) are ready before daphne forks.
    page = site_page
    for viewport in (DESKTOP, PHONE):
        page.set_viewport_size(viewport)
        for who, pages in stops(tour).items():
            site_context.clear_cookies()
            if who is not None:
                login(page, who, tour.password)
                site_problems.take()
            for stop in pages:
                visit(page, stop, viewport["width"], site_problems)


def test_the_watch_catches_a_policy_violation(
    site_page: Page, site_problems: PageProblems, tour: Tour
) -> None:
    """The tour's "no violation" means something: an inline style and an inline script, added
    on purpose, are both blocked by the app's policy and reported."""
    page = site_page
    page.goto("/accounts/login/")
    assert site_problems.take() == []
    page.evaluate(
        """() => {
            document.body.setAttribute("style", "background: red");
            const script = document.createElement("script");
            script.textContent = "window.__ran = true";
            document.body.append(script);
        }"""
    )
    expect(page.locator("body")).to_have_attribute("style", "background: red")
    page.wait_for_function("() => true")  # let the browser deliver the events
    found = "\n".join(site_problems.take())
    assert "style-src" in found, found
    assert "script-src" in found, found
    assert page.evaluate("window.__ran") is None


def test_the_skip_link_is_the_first_tab_stop_and_reaches_the_composer(
    site_page: Page, site_problems: PageProblems, tour: Tour
) -> None:
    page = site_page
    login(page, tour.username, tour.password)

    page.goto(f"/chats/{tour.conversation_id}/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content", exact=True)
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()  # shown once focused
    assert skip.evaluate("el => getComputedStyle(el).outlineStyle") != "none"
    page.keyboard.press("Enter")
    composer = page.get_by_label("Your question", exact=True)
    expect(composer).to_be_focused()  # one Tab and Enter from page load
    page.keyboard.type("Typed straight away")
    expect(composer).to_have_value("Typed straight away")

    # Elsewhere it skips the header to the main content.
    page.goto("/settings/")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator("main#content")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("main a").first).to_be_focused()  # next stop: in the page, past the nav
    assert site_problems.take() == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_focus_is_visible_in_both_themes(
    site_context: BrowserContext, site_page: Page, tour: Tour, scheme: str
) -> None:
    page = site_page
    page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
    login(page, tour.username, tour.password)
    page.goto("/settings/")
    page.locator("#tokens input[name=name]").focus()
    page.keyboard.press("Shift+Tab")  # keyboard focus: :focus-visible applies
    focused = page.evaluate(
        """() => {
            const el = document.activeElement, style = getComputedStyle(el);
            const bg = getComputedStyle(document.body).backgroundColor;
            return {tag: el.tagName, style: style.outlineStyle,
                    width: parseFloat(style.outlineWidth), color: style.outlineColor,
                    background: bg};
        }"""
    )
    assert focused["style"] == "solid", focused
    assert focused["width"] >= 2, focused
    assert contrast(focused["color"], focused["background"]) >= 3, focused


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two computed rgb() colours."""

    def luminance(color: str) -> float:
        r, g, b_ = (int(x) / 255 for x in re.findall(r"\d+", color)[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b_)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


# Records <html data-theme> when <body> is first parsed: the theme must be set before the
# first paint, not after the page has shown in the wrong colours.
RECORD_THEME_AT_FIRST_PAINT = """
new MutationObserver((_, observer) => {
    if (document.body) {
        window.__themeAtBody = document.documentElement.getAttribute("data-theme") || "";
        observer.disconnect();
    }
}).observe(document, {childList: true, subtree: true});
"""


def background(page: Page) -> str:
    return str(page.evaluate("() => getComputedStyle(document.body).backgroundColor"))


def test_the_theme_follows_the_system_and_the_picker_wins_on_every_page(
    site_context: BrowserContext, site_page: Page, site_problems: PageProblems, tour: Tour
) -> None:
    page = site_page
    site_context.add_init_script(RECORD_THEME_AT_FIRST_PAINT)
    page.emulate_media(color_scheme="dark")
    page.goto("/accounts/login/")
    picker = page.get_by_label("Theme", exact=True)
    expect(picker).to_have_value("system")
    dark = background(page)
    assert contrast(dark, "rgb(0, 0, 0)") < 1.5, dark  # the system's dark, with no choice made

    picker.select_option("light")
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    light = background(page)
    assert contrast(light, "rgb(255, 255, 255)") < 1.2, light

    # Kept across pages and applied before the first paint (no flash of the other theme).
    login(page, tour.username, tour.password)
    page.goto(f"/notebooks/{tour.notebook_id}/")
    assert page.evaluate("window.__themeAtBody") == "light"
    assert background(page) == light
    picker.select_option("dark")
    page.emulate_media(color_scheme="light")
    page.goto("/settings/")
    assert page.evaluate("window.__themeAtBody") == "dark"
    assert background(page) == dark
    expect(picker).to_have_value("dark")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(DESKTOP)
    page.goto(f"/chats/{tour.conversation_id}/")
    page.screenshot(path=SCREENSHOTS / "page-conversation-dark-1366.png", full_page=True)
    page.goto(f"/notes/{tour.note_id}/")
    page.screenshot(path=SCREENSHOTS / "page-note-dark-1366.png", full_page=True)
    page.set_viewport_size(PHONE)
    page.goto(f"/search/?q={tour.search_query.replace(' ', '+')}")
    page.screenshot(path=SCREENSHOTS / "page-search-dark-390.png", full_page=True)

    # Back to the system's choice.
    picker.select_option("system")
    page.goto("/")
    assert page.evaluate("window.__themeAtBody") == ""
    assert background(page) == light
    assert site_problems.take() == []


def test_a_new_token_has_a_copy_button_that_says_copied(
    site_context: BrowserContext, site_page: Page, site_problems: PageProblems, tour: Tour
) -> None:
    site_context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = site_page
    login(page, tour.username, tour.password)
    page.goto("/settings/")
    page.locator("#tokens input[name=name]").fill("backup script")
    page.get_by_role("button", name="Create token", exact=True).click()
    token = page.locator("#new-token")
    expect(token).to_have_value(re.compile(r"^nbk_"))
    status = page.locator("[data-copy-status=new-token]")
    expect(status).to_have_attribute("aria-live", "polite")
    expect(status).to_have_text("")

    page.get_by_role("button", name="Copy", exact=True).click()
    expect(status).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == token.input_value()
    page.screenshot(path=SCREENSHOTS / "page-settings-new-token-1366.png", full_page=True)
    page.set_viewport_size(PHONE)
    page.screenshot(path=SCREENSHOTS / "page-settings-new-token-390.png", full_page=True)
    sizes = overflow(page)
    assert sizes["scrollWidth"] <= sizes["innerWidth"], sizes

    # Without the Clipboard API (plain http on a LAN address): the text is selected and
    # copied the old way, and the page still says so.
    page.evaluate("Object.defineProperty(navigator, 'clipboard', {value: undefined})")
    page.get_by_role("button", name="Copy", exact=True).click()
    expect(status).to_have_text(re.compile(r"^(Copied|Selected: press Ctrl\+C)"))
    selected = token.evaluate("el => [el.selectionStart, el.selectionEnd, el.value.length]")
    assert selected[0] == 0, selected
    assert selected[1] == selected[2], selected
    assert site_problems.take() == []
