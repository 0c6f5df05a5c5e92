"""List every external link of a built site, for an author to check by hand before publishing.

    python site_tests/tools/external_links.py site          # after `nox -s build`
    python site_tests/tools/external_links.py site --urls   # the addresses alone, one per line

Reads every HTML page under the site folder and prints each link that leaves the site (http,
https or protocol-relative, in href or src), once, followed by the pages that use it. It opens
no connection: the build machines have no network, so a person (or a link checker run where
there is one) follows the list. Exit status 1 when the folder holds no HTML at all.
"""

import argparse
import collections
import pathlib
import sys
from html.parser import HTMLParser
from urllib.parse import urlsplit


class LinkCollector(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value and is_external(value):
                self.links.append(value.strip())


def is_external(url):
    parts = urlsplit(url.strip())
    return parts.scheme in ("http", "https") or (not parts.scheme and url.startswith("//"))


def external_links(site):
    """{url: [pages that link to it]}, pages as paths relative to `site`, both sorted."""
    users = collections.defaultdict(set)
    pages = sorted(site.rglob("*.html"))
    for page in pages:
        collector = LinkCollector()
        collector.feed(page.read_text(encoding="utf-8", errors="replace"))
        for url in collector.links:
            users[url].add(page.relative_to(site).as_posix())
    return {url: sorted(users[url]) for url in sorted(users)}, len(pages)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=pathlib.Path, help="the built site folder (mkdocs' site/)")
    parser.add_argument("--urls", action="store_true", help="print the addresses only")
    args = parser.parse_args(argv)
    links, page_count = external_links(args.site)
    if page_count == 0:
        sys.exit(f"no HTML pages under {args.site}: build the site first (nox -s build)")
    for url, pages in links.items():
        print(url)
        if not args.urls:
            for page in pages:
                print(f"    {page}")
    if not args.urls:
        print(f"{len(links)} external links on {page_count} pages", file=sys.stderr)


if __name__ == "__main__":
    main()
