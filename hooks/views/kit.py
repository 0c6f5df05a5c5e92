"""The figure kit every drawn figure uses: an SVG's root, its scroll box, key and caption, and
the one palette of boxes, arrows and text.

Figures are inline SVG drawn at build time, from a lab's record or from code. Inline, not as
<img> files, so that the drawing takes its colours from the page: the CSS in
assets/stylesheets/extra.css points the classes below at Material's palette variables, and the
figures follow the light/dark toggle. The presentation attributes are the fallback when that
stylesheet is missing. Every SVG is role="img" with a text alternative made from the same
numbers it draws.
"""

import html

from views.common import LEGIBLE_PX, PHONE_COLUMN_PX

ESC = html.escape
ACCENT, PRIMARY = "#3f51b5", "#bf360c"  # fallbacks: indigo, and extra.css's deep orange


def svg_open(width, height, labelled_by, css_class, font_size):
    """The root element. Text defaults are set here once, and every <text> inherits them."""
    return (
        f'<svg class="{css_class}" viewBox="0 0 {width:g} {height:g}" width="{width:g}" '
        f'height="{height:g}" role="img" aria-labelledby="{labelled_by}" '
        f'xmlns="http://www.w3.org/2000/svg" font-size="{font_size}" text-anchor="middle" '
        'dominant-baseline="central" fill="currentColor">'
    )


def scroll_box(inner, width, font_size, label):
    """A figure drawn `width` wide with `font_size` text, never shrunk below legible.

    Past the width at which its text would fall under LEGIBLE_PX, the figure keeps that width
    and its box scrolls sideways (extra.css); the box takes keyboard focus so that it can be
    scrolled without a pointer. Only a figure too wide for a phone says so.
    """
    smallest = width * LEGIBLE_PX / font_size
    hint = "Scroll the figure sideways to see all of it."
    return (
        f'<div class="fig-scroll" style="--fig-min-width: {smallest:.0f}px" tabindex="0" '
        f'role="region" aria-label="{ESC(label)}">{inner}</div>'
        + (f'<p class="fig-scroll__hint">{hint}</p>' if smallest > PHONE_COLUMN_PX else "")
    )


def key(entries):
    """A figure's key: (swatch SVG body, words) pairs, drawn with the figure's own classes."""
    items = "".join(
        '<li><svg class="fig-key__swatch" viewBox="0 0 44 22" aria-hidden="true" '
        f'focusable="false">{swatch}</svg><span>{ESC(words)}</span></li>'
        for swatch, words in entries
    )
    return f'<ul class="fig-key">{items}</ul>'


def diagram(uid, body, *, width, height, font_size, alt, caption, key_entries=(), label):
    """A complete figure: the SVG (`body` drawn in a `width` x `height` box, its smallest text
    `font_size` units), its key, and its caption, in one <figure>.

    `alt` is the text alternative, read by a screen reader in place of the drawing: the
    figure in words, with every number it draws. `label` names the scroll box.
    """
    svg = (
        svg_open(width, height, f"{uid}-alt", "fig-diagram", font_size)
        + f'<title id="{uid}-alt">{ESC(alt)}</title>'
        + body
        + "</svg>"
    )
    return (
        f'<figure class="fig-figure" id="{uid}">'
        + scroll_box(svg, width, font_size, label)
        + (key(key_entries) if key_entries else "")
        + f"<figcaption>{ESC(caption)}</figcaption></figure>\n"
    )


def arrowhead(marker_id):
    return (
        f'<defs><marker id="{marker_id}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        f'<path class="fig-arrowhead" d="M0,0L10,5L0,10z" fill="{ACCENT}"/></marker></defs>'
    )


# The one palette every figure's rectangles are drawn in. Per kind: the colour extra.css's
# .fig-fill--KIND gives when the stylesheet is missing, and the one fill-opacity that kind is
# drawn with, light or dark. Primary and accent at 0.4 keep the text colour on them above 4.5:1
# in both schemes (about 11:1 light, 5:1 dark; at 0.6 dark falls to 3.5:1); muted text on them
# falls under it, so none is muted. Faint is Material's lightest text colour (7 % black, 12 %
# white in dark mode), its fallback that grey on white, so it is drawn at full opacity. "none"
# is an outline only.
KINDS = {
    "primary": (PRIMARY, "0.4"),
    "accent": (ACCENT, "0.4"),
    "faint": ("#ededed", "1"),
    "none": ("none", None),
}
OUTLINE = 'stroke="currentColor" stroke-width="1"'  # every box's outline: the text colour
DASHES = ' stroke-dasharray="4 3"'  # a dashed outline: something absent, passed on or a copy


def box(x, y, w, h, kind="faint", *, dashed=False, rx=3, outlined=True):
    """A rectangle of the palette: class fig-fill--KIND, its fallback fill, its fill-opacity.

    `w` is never drawn under half a unit, so that a bar for a tiny value still shows. With
    `outlined=False` the box leaves its stroke to the `outlines()` group it is put in, which
    keeps a figure of many boxes small.
    """
    fill, opacity = KINDS[kind]
    x, y, w, h = (f"{round(v, 1):g}" for v in (x, y, max(w, 0.5), h))
    return (
        f'<rect class="fig-fill--{kind} fig-stroke" x="{x}" y="{y}" width="{w}" height="{h}"'
        + (f' rx="{rx:g}"' if rx else "")
        + f' fill="{fill}"'
        + (f' fill-opacity="{opacity}"' if opacity else "")
        + (f" {OUTLINE}" if outlined else "")
        + (DASHES if dashed else "")
        + "/>"
    )


def outlines(boxes):
    """Boxes drawn with `outlined=False`, outlined through one group."""
    return f'<g class="fig-stroke" {OUTLINE}>' + "".join(boxes) + "</g>"


def swatch(kind, dashed=False, rx=3):
    """A key's swatch: a box of `kind`, drawn as the figure draws it."""
    return box(2, 3, 40, 16, kind, dashed=dashed, rx=rx)


def text(x, y, body, anchor=None, muted=False, bold=False):
    extra = f' text-anchor="{anchor}"' if anchor else ""  # "start" or "end"; middle by default
    extra += ' class="fig-muted"' if muted else ""
    extra += ' font-weight="700"' if bold else ""
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{ESC(body)}</text>'
