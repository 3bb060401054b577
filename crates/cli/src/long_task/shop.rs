//! The synthetic shop the long task's agent browses: deterministic pages (listings, products,
//! articles) of a plausible size, as snapshots and page texts, and the tools that move through
//! them ([`ShopTools`]), so a run needs no browser.

use std::fmt::Write as _;
use std::sync::Arc;

use hearth_agent::{ElementInfo, PageInfo, Snapshot, ToolError, ToolExecutor, ToolInvocation, ToolOutput};
use hearth_model::tokenizer::Tokenizer;

use super::{PAGE_TEXT_TOKENS, SNAPSHOT_TOKENS};

/// Deterministic pseudo-random choices (SplitMix64).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub(super) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

// Words of the shop and its pages. None is a word the safety policy treats as committing
// ("buy", "send", "remove"…) or a sensitive URL word ("cart", "basket", "pay"…), so the script's
// clicks run without confirmation.
const BRANDS: &[&str] = &[
    "Nordhem",
    "Casa Lume",
    "Oakfield & Co.",
    "Maison Verte",
    "Kivi",
    "Hanami Home",
    "Blue Fern",
    "Atelier 9",
    "Tidewater",
    "Fjellstue",
    "Little Orchard",
    "Studio Marl",
];
const MATERIALS: &[&str] = &[
    "linen",
    "cotton",
    "wool",
    "velvet",
    "jute",
    "bamboo",
    "ceramic",
    "oak",
    "walnut",
    "stoneware",
    "recycled glass",
    "brushed steel",
    "rattan",
    "boucle",
];
const ITEMS: &[&str] = &[
    "cushion cover",
    "throw blanket",
    "table runner",
    "plant pot",
    "desk lamp",
    "storage box",
    "serving bowl",
    "wall mirror",
    "floor cushion",
    "curtain panel",
    "bath towel",
    "tea light holder",
    "bookend pair",
    "doormat",
];
const COLOURS: &[&str] = &[
    "sage green",
    "oat",
    "charcoal",
    "terracotta",
    "navy",
    "mustard",
    "ivory",
    "slate blue",
    "forest green",
    "blush pink",
    "sand",
    "graphite",
];
pub(super) const SIZES: &[&str] =
    &["45 × 45 cm", "50 × 70 cm", "130 × 170 cm", "Ø 18 cm", "Ø 24 cm", "set of 2", "set of 4", "60 × 90 cm"];
const FEATURES: &[&str] = &[
    "machine washable",
    "hidden zip",
    "OEKO-TEX certified",
    "hand-woven",
    "dishwasher safe",
    "dimmable LED",
    "free returns",
    "ships in 2–3 days",
    "low stock",
    "new season",
    "made in Portugal",
    "FSC certified wood",
];
const REVIEWERS: &[&str] =
    &["Maria", "Jonas", "Aiko", "Priya", "Tom", "Lena", "Samir", "Chloé", "Wei", "Olu", "Ingrid", "Mateo"];
const OPINIONS: &[&str] = &[
    "softer than I expected and the colour matches the photos",
    "the stitching came loose after a few washes",
    "arrived quickly, well packed, no plastic",
    "smaller than it looks, check the measurements",
    "lovely texture, a bit of shedding at first",
    "exactly what our living room needed",
    "the zip is sturdy and hidden well",
    "faded slightly in direct sunlight",
    "good value for the quality",
    "the second one I ordered had a slightly different shade",
];
pub(super) const QUERIES: &[&str] = &[
    "linen cushion cover sage green",
    "sage green cushion 45x45",
    "washable linen cushion",
    "green throw pillow cover",
];

/// Which page the tools are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PageKind {
    /// Search results of the shop.
    Listing,
    /// One product: options, delivery form, reviews.
    Product(u32),
    /// A news article (the long-answer task).
    Article,
}

impl PageKind {
    pub(super) fn info(self, query: &str) -> PageInfo {
        match self {
            PageKind::Listing => PageInfo {
                url: format!("https://shop.example/search?q={}", query.replace(' ', "+")),
                title: format!("“{query}” — Home & Living — Hearth Test Shop"),
            },
            PageKind::Product(id) => {
                let p = Product::new(id);
                PageInfo {
                    url: format!("https://shop.example/p/{id}-{}", p.slug()),
                    title: format!("{} — Hearth Test Shop", p.name()),
                }
            }
            PageKind::Article => PageInfo {
                url: "https://news.example/energy/riverside-solar-cooperative".into(),
                title: "How a riverside town built Europe's busiest solar cooperative — News Example".into(),
            },
        }
    }
}

/// A product of the test shop, derived from its id.
pub(super) struct Product {
    pub(super) id: u32,
    pub(super) brand: &'static str,
    pub(super) material: &'static str,
    pub(super) item: &'static str,
    pub(super) colour: &'static str,
    pub(super) size: &'static str,
    pub(super) price_cents: u32,
    pub(super) rating_tenths: u32,
    pub(super) reviews: u32,
    pub(super) features: [&'static str; 2],
}

impl Product {
    pub(super) fn new(id: u32) -> Self {
        let mut r = Rng::new(u64::from(id) * 7 + 3);
        Product {
            id,
            brand: r.pick(BRANDS),
            material: r.pick(MATERIALS),
            item: r.pick(ITEMS),
            colour: r.pick(COLOURS),
            size: r.pick(SIZES),
            price_cents: 990 + r.below(9_000) as u32,
            rating_tenths: 31 + r.below(19) as u32,
            reviews: 3 + r.below(2_400) as u32,
            features: [r.pick(FEATURES), r.pick(FEATURES)],
        }
    }

    pub(super) fn name(&self) -> String {
        format!("{} {} {}, {}, {}", self.brand, self.material, self.item, self.size, self.colour)
    }

    pub(super) fn slug(&self) -> String {
        let words = format!("{} {}", self.material, self.item);
        words.split_whitespace().collect::<Vec<_>>().join("-")
    }

    pub(super) fn price(&self) -> String {
        format!("€{}.{:02}", self.price_cents / 100, self.price_cents % 100)
    }

    pub(super) fn rating(&self) -> String {
        format!("{}.{}", self.rating_tenths / 10, self.rating_tenths % 10)
    }

    pub(super) fn line(&self) -> String {
        format!(
            "{} {} · {} out of 5 ({} reviews) · {}, {}",
            self.price(),
            self.name(),
            self.rating(),
            self.reviews,
            self.features[0],
            self.features[1]
        )
    }
}

fn element(index: u32, tag: &str, text: &str, attributes: &[(&str, &str)], depth: u8) -> ElementInfo {
    ElementInfo {
        index,
        tag: tag.into(),
        text: text.into(),
        attributes: attributes.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        depth,
        ..Default::default()
    }
}

/// First element index of snapshot `n` (1-based): every snapshot shows a changed page.
pub(super) fn base(n: u32) -> u32 {
    n * 1_000
}

/// Listing layout: the search field, then sort and filters, then products from this index on
/// (a link, then its wishlist button).
pub(super) const LISTING_SEARCH: u32 = 0;
pub(super) const LISTING_FIRST_PRODUCT: u32 = 6;
/// Product page layout.
pub(super) const PRODUCT_BACK: u32 = 0;
pub(super) const PRODUCT_SIZE: u32 = 1;
pub(super) const PRODUCT_QUANTITY: u32 = 3;

/// The browser tools, answering like a real shop: snapshots of about [`SNAPSHOT_TOKENS`],
/// page texts of about [`PAGE_TEXT_TOKENS`], short results for actions.
pub(super) struct ShopTools {
    pub(super) tokenizer: Arc<Tokenizer>,
    pub(super) page: PageKind,
    pub(super) query: String,
    pub(super) snapshots: u32,
    pub(super) reads: u32,
    pub(super) latest: Option<Snapshot>,
}

impl ShopTools {
    pub(super) fn new(tokenizer: Arc<Tokenizer>) -> Self {
        ShopTools {
            tokenizer,
            page: PageKind::Listing,
            query: "cushion cover".into(),
            snapshots: 0,
            reads: 0,
            latest: None,
        }
    }

    pub(super) fn tokens(&self, text: &str) -> usize {
        self.tokenizer.encode(text).map_or(text.len() / 4, |ids| ids.len())
    }

    /// Adds elements from `more` until the rendered snapshot reaches the target size.
    pub(super) fn fill(&self, elements: &mut Vec<ElementInfo>, mut more: impl FnMut(u32) -> Vec<ElementInfo>) {
        let render = |e: &[ElementInfo]| Snapshot { page: PageInfo::default(), elements: e.to_vec() }.render(None);
        let mut tokens = self.tokens(&render(elements));
        let mut k = 0;
        while tokens < SNAPSHOT_TOKENS {
            let batch = more(k);
            tokens += self.tokens(&render(&batch));
            elements.extend(batch);
            k += 1;
        }
    }

    pub(super) fn snapshot(&mut self) -> Snapshot {
        self.snapshots += 1;
        let n = self.snapshots;
        let b = base(n);
        let page = self.page.info(&self.query);
        let mut elements = Vec::new();
        match self.page {
            PageKind::Listing | PageKind::Article => {
                let query = self.query.clone();
                elements.push(element(
                    b + LISTING_SEARCH,
                    "input",
                    "",
                    &[("type", "search"), ("name", "q"), ("placeholder", "Search home & living"), ("value", &query)],
                    0,
                ));
                elements.push(element(b + 1, "select", "Sort by", &[("name", "sort"), ("value", "Relevance")], 0));
                let mut r = Rng::new(u64::from(n));
                for i in 2..LISTING_FIRST_PRODUCT {
                    let label = format!("Colour: {} ({})", r.pick(COLOURS), 3 + r.below(80));
                    let mut e = element(b + i, "input", &label, &[("type", "checkbox")], 1);
                    e.role = Some("checkbox".into());
                    elements.push(e);
                }
                self.fill(&mut elements, |k| {
                    let p = Product::new(n * 100 + k);
                    let href = format!("/p/{}-{}", p.id, p.slug());
                    let i = LISTING_FIRST_PRODUCT + 2 * k;
                    vec![
                        element(b + i, "a", &p.line(), &[("href", &href)], 1),
                        element(b + i + 1, "button", &format!("Save {} {} to wishlist", p.material, p.item), &[], 2),
                    ]
                });
                let last = b + 999;
                elements.push(element(last - 2, "a", "Next page", &[("href", "/search?page=2")], 0));
                elements.push(element(last - 1, "a", "Delivery and returns", &[("href", "/help/delivery")], 0));
            }
            PageKind::Product(id) => {
                let p = Product::new(id);
                let back = format!("/search?q={}", self.query.replace(' ', "+"));
                elements.push(element(b + PRODUCT_BACK, "a", "Back to results", &[("href", &back)], 0));
                elements.push(element(b + PRODUCT_SIZE, "select", "Size", &[("name", "size"), ("value", p.size)], 1));
                elements.push(element(b + 2, "select", "Colour", &[("name", "colour"), ("value", p.colour)], 1));
                elements.push(element(
                    b + PRODUCT_QUANTITY,
                    "input",
                    "",
                    &[("type", "number"), ("name", "quantity"), ("aria-label", "Quantity"), ("value", "1")],
                    1,
                ));
                elements.push(element(b + 4, "button", "Save to wishlist", &[], 1));
                elements.push(element(
                    b + 5,
                    "input",
                    "",
                    &[("type", "text"), ("name", "postcode"), ("placeholder", "Postcode for a delivery estimate")],
                    1,
                ));
                elements.push(element(b + 6, "button", "Estimate delivery", &[], 1));
                self.fill(&mut elements, |k| {
                    let mut r = Rng::new(u64::from(id) * 31 + u64::from(k));
                    let i = 10 + 3 * k;
                    let who = r.pick(REVIEWERS);
                    let review = format!("{who}, {} stars: “{}”", 1 + r.below(5), r.pick(OPINIONS));
                    let related = Product::new(id * 10 + k);
                    vec![
                        element(b + i, "button", &format!("Helpful ({})", r.below(90)), &[("aria-label", &review)], 2),
                        element(b + i + 1, "a", &format!("More reviews by {who}"), &[("href", "/reviews")], 2),
                        element(b + i + 2, "a", &related.line(), &[("href", &format!("/p/{}", related.id))], 1),
                    ]
                });
            }
        }
        Snapshot { page, elements }
    }

    pub(super) fn page_text(&mut self) -> (PageInfo, String) {
        self.reads += 1;
        let page = self.page.info(&self.query);
        let mut r = Rng::new(1_000 + u64::from(self.reads));
        let mut text = format!("{}\n{}\n\n", page.title, page.url);
        while self.tokens(&text) < PAGE_TEXT_TOKENS {
            let paragraph = match self.page {
                PageKind::Article => article_paragraph(&mut r),
                PageKind::Product(id) => product_paragraph(&Product::new(id), &mut r),
                PageKind::Listing => {
                    let p = Product::new(r.below(100_000) as u32);
                    format!("{}. {}\n", p.name(), p.line())
                }
            };
            text.push_str(&paragraph);
            text.push('\n');
        }
        (page, text)
    }

    pub(super) fn click(&mut self, index: u32) -> Result<ToolOutput, ToolError> {
        let Some(target) = self.latest.as_ref().and_then(|s| s.element(index)).cloned() else {
            return Err(ToolError(format!("no element [{index}]; take a new snapshot")));
        };
        match target.attr("href") {
            Some(href) if href.starts_with("/p/") => {
                let id = href[3..].split('-').next().and_then(|n| n.parse().ok()).unwrap_or(1);
                self.page = PageKind::Product(id);
            }
            Some(href) if href.starts_with("/search") => self.page = PageKind::Listing,
            _ => {}
        }
        let page = self.page.info(&self.query);
        let label: String = target.text.chars().take(60).collect();
        Ok(ToolOutput {
            text: format!("Clicked [{index}] {} “{label}”. The page is now “{}”.", target.tag, page.title),
            page: Some(page),
            ..ToolOutput::default()
        })
    }
}

impl ToolExecutor for ShopTools {
    async fn execute(&mut self, call: &ToolInvocation) -> Result<ToolOutput, ToolError> {
        let index = call.arguments.get("index").and_then(|v| v.as_u64()).map(|i| i as u32);
        let text = |key: &str| call.arguments.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        match call.name.as_str() {
            "snapshot" => {
                let snapshot = self.snapshot();
                self.latest = Some(snapshot.clone());
                Ok(ToolOutput::snapshot(snapshot))
            }
            "read_page" => {
                let (page, text) = self.page_text();
                Ok(ToolOutput::page_text(page, text))
            }
            "click" => self.click(index.unwrap_or(0)),
            "type" => {
                let typed = text("text");
                if index.is_some_and(|i| i % 1_000 == LISTING_SEARCH) && self.page == PageKind::Listing {
                    self.query = typed.clone();
                }
                Ok(ToolOutput::text(format!("Typed “{typed}” into [{}]. Results updated.", index.unwrap_or(0))))
            }
            "select" => Ok(ToolOutput::text(format!("Selected “{}” in [{}].", text("option"), index.unwrap_or(0)))),
            "scroll" => Ok(ToolOutput::text("Scrolled down: now showing 35–70 % of the page.")),
            "press_key" => Ok(ToolOutput::text(format!("Pressed {} on [{}].", text("key"), index.unwrap_or(0)))),
            "hover" => Ok(ToolOutput::text("Hovered; a tooltip opened.")),
            "wait_for" => Ok(ToolOutput::text("Found it.")),
            other => Err(ToolError(format!("{other} is not available on this test page"))),
        }
    }
}

fn product_paragraph(p: &Product, r: &mut Rng) -> String {
    let mut out = String::new();
    match r.below(3) {
        0 => {
            let _ = write!(
                out,
                "About this item. The {} {} from {} is {} and {}. It measures {} and comes in {} as well as {} other colours. ",
                p.material,
                p.item,
                p.brand,
                p.features[0],
                p.features[1],
                p.size,
                p.colour,
                2 + r.below(9)
            );
            let _ = write!(
                out,
                "Care: wash at {} °C, do not tumble dry, iron on a low setting. Delivery in {}–{} working days; returns are free within {} days.",
                20 + 10 * r.below(4),
                1 + r.below(3),
                4 + r.below(4),
                14 + 16 * r.below(2)
            );
        }
        _ => {
            for _ in 0..4 {
                let _ = write!(
                    out,
                    "Review by {} ({} of 5, {}): {}; {}. ",
                    r.pick(REVIEWERS),
                    1 + r.below(5),
                    ["January", "March", "May", "August", "October", "December"][r.below(6)],
                    r.pick(OPINIONS),
                    r.pick(OPINIONS)
                );
            }
        }
    }
    out
}

fn article_paragraph(r: &mut Rng) -> String {
    const WHO: &[&str] = &[
        "the cooperative's treasurer",
        "a retired electrician who fitted the first panels",
        "the mayor",
        "a member who joined in the second year",
        "the regional grid operator",
        "an engineer from the university",
    ];
    const WHAT: &[&str] = &[
        "the winter months still need power from the grid",
        "the battery bank pays for itself in about nine years",
        "members vote on every new roof",
        "the school saves enough to fund two teaching assistants",
        "surplus power is sold to the neighbouring village",
        "the waiting list is longer than the list of members",
    ];
    let mut out = String::new();
    for _ in 0..5 {
        let _ = write!(
            out,
            "In {}, {} said that {}; the cooperative now has {} members, {} roofs and {:.1} MW of panels, which produced {} MWh last year, about {} % of the town's use. ",
            2014 + r.below(11),
            r.pick(WHO),
            r.pick(WHAT),
            800 + r.below(3_000),
            40 + r.below(300),
            1.0 + r.below(90) as f64 / 10.0,
            900 + r.below(9_000),
            10 + r.below(60)
        );
    }
    out
}
