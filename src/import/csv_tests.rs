//! Tests of the CSV reader.

use super::*;
use crate::domain::dates::days_from_civil;
use crate::import::corpus;

fn name(n: &str) -> Option<Column> {
    Some(Column::Name(n.into()))
}

fn idx(i: i64) -> Option<Column> {
    Some(Column::Index(i))
}

/// Date and amount by name: the layout most unit tests use.
fn plain() -> Mapping {
    Mapping { date: name("Date"), amount: name("Amount"), ..Mapping::default() }
}

fn lines(st: &[Statement]) -> Vec<&Line> {
    st.iter().flat_map(|s| s.lines.iter()).collect()
}

fn amounts(st: &[Statement]) -> Vec<i64> {
    lines(st).iter().map(|l| l.amount_cents).collect()
}

fn err(bytes: &[u8], m: &Mapping) -> ImportError {
    read(bytes, m).expect_err("refused")
}

/// The mapping a user would save for each CSV of the corpus: CSV_SPECS of its expected.py.
fn corpus_mapping(file: &str) -> Option<Mapping> {
    let m = match file {
        "csv_dkb_cc_latin1.csv" => Mapping {
            charset: "ISO-8859-1".into(),
            delimiter: ';',
            header_first_cell: Some("Umsatz abgerechnet".into()),
            date: name("Wertstellung"),
            date_format: "%d.%m.%Y".into(),
            amount: name("Betrag (EUR)"),
            decimal_mark: ',',
            fixed_currency: Some("EUR".into()),
            fixed_account: Some("1234********1234".into()),
            ..Mapping::default()
        },
        "csv_swedbank_lt.csv" => Mapping {
            header_first_cell: Some("Sąskaitos Nr.".into()),
            filter: Some(Filter { column: Column::Index(1), equals: "20".into() }),
            date: idx(2),
            amount: idx(5),
            indicator: idx(7),
            debit_mark: Some("D".into()),
            currency: idx(6),
            account: idx(0),
            id: idx(8),
            ..Mapping::default()
        },
        "csv_dab_bom.csv" => Mapping {
            delimiter: ';',
            header_first_cell: Some("Buchungstag".into()),
            date: name("Buchungstag"),
            date_format: "%d.%m.%Y %H:%M:%S".into(),
            amount: name("Betrag in EUR"),
            decimal_mark: ',',
            thousands_separator: Some('.'),
            fixed_currency: Some("EUR".into()),
            ..Mapping::default()
        },
        "csv_danske_cp1257.csv" => Mapping {
            charset: "cp1257".into(),
            header_first_cell: Some("Date".into()),
            date: idx(0),
            date_format: "%Y:%m:%d".into(),
            amount: idx(-2),
            fixed_currency: Some("USD".into()),
            ..Mapping::default()
        },
        _ => return None,
    };
    Some(m)
}

#[test]
fn every_corpus_csv_reads_as_the_manifest_says() {
    let entries = corpus::entries("csv");
    assert_eq!(entries.len(), 4);
    for e in entries {
        let file = e["file"].as_str().unwrap();
        let m = corpus_mapping(file).unwrap_or_else(|| panic!("{file}: no mapping"));
        let got = read(&corpus::bytes(&e), &m).unwrap_or_else(|err| panic!("{file}: {err}"));
        corpus::check(&e, &got);
    }
}

#[test]
fn defaults_read_a_plain_file() {
    let csv = "\u{feff}Date,Payee,Memo,Id,Amount\n2024-01-31, Shop ,milk,A1,-12.50\n2024-02-01,,,,3\n";
    let m = Mapping { payee: name("Payee"), memo: name("Memo"), id: name("Id"), ..plain() };
    let st = read(csv.as_bytes(), &m).unwrap();
    assert_eq!(st.len(), 1);
    assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (None, None));
    let l = &st[0].lines;
    assert_eq!(
        l[0],
        Line {
            day: days_from_civil(2024, 1, 31),
            amount_cents: -1250,
            payee: Some("Shop".into()),
            memo: Some("milk".into()),
            bank_id: Some("A1".into()),
            source_line: 2,
        }
    );
    assert_eq!((l[1].payee.as_deref(), l[1].bank_id.as_deref(), l[1].amount_cents), (None, None, 300));
    assert_eq!(l[1].source_line, 3);
}

#[test]
fn semicolon_and_tab_delimiters() {
    let m = Mapping { delimiter: ';', ..plain() };
    let st = read(b"Date;Amount\n2024-01-02;1,5\n", &Mapping { decimal_mark: ',', ..m }).unwrap();
    assert_eq!(amounts(&st), [150]);
    let m = Mapping { delimiter: '\t', ..plain() };
    assert_eq!(amounts(&read(b"Date\tAmount\n2024-01-02\t-7\n", &m).unwrap()), [-700]);
}

#[test]
fn header_after_skipped_lines_or_found_by_its_first_cell() {
    let csv = b"Account 1\nPeriod,x\n\nDate,Amount\n2024-01-02,1\n";
    let m = Mapping { skip_lines: 3, ..plain() };
    let st = read(csv, &m).unwrap();
    assert_eq!((amounts(&st), lines(&st)[0].source_line), (vec![100], 5));
    let m = Mapping { header_first_cell: Some(" Date ".into()), ..plain() };
    assert_eq!(amounts(&read(csv, &m).unwrap()), [100]);
    // Without either, the first row is the header, and it lacks the columns.
    let e = err(csv, &plain());
    assert_eq!(e.line, 1);
    assert!(e.msg.contains("no column `Date`"), "{e}");
}

#[test]
fn columns_by_index_and_from_the_end() {
    let m = Mapping { date: idx(0), amount: idx(-1), payee: idx(1), ..Mapping::default() };
    let st = read(b"D,P,X,A\n2024-03-01,shop,9,-1\n2024-03-02,short,2\n", &m).unwrap();
    assert_eq!(amounts(&st), [-100, 200]);
    assert_eq!(lines(&st)[1].payee.as_deref(), Some("short"));
    let e = err(b"D,P\n2024-03-01,1\n", &Mapping { amount: idx(5), ..m.clone() });
    assert_eq!(e.line, 1);
    assert!(e.msg.contains("past the header"), "{e}");
}

#[test]
fn date_formats() {
    let day = |fmt: &str, text: &str| DateFormat::parse(fmt).unwrap().day(text, 1);
    let d = |y, m, d| -> Result<i64, ImportError> { Ok(days_from_civil(y, m, d)) };
    assert_eq!(day("%Y:%m:%d", "2012:03:01"), d(2012, 3, 1));
    assert_eq!(day("%d.%m.%Y %H:%M:%S", "01.10.2013  23:59:60"), d(2013, 10, 1));
    assert_eq!(day("%d/%m/%y", "5/1/24"), d(2024, 1, 5));
    assert_eq!(day("%m/%d/%y", "12/31/99"), d(1999, 12, 31));
    assert_eq!(day("%Y%m%d", "20240229"), d(2024, 2, 29));
    assert_eq!(day("%d%%%m%%%Y", "01%02%2024"), d(2024, 2, 1));
    assert_eq!(day("%d. %m. %Y", " 1. 2. 2024 "), d(2024, 2, 1));
    for (fmt, bad) in [
        ("%Y%m%d", "20251345"),
        ("%Y%m%d", "20230229"),
        ("%Y-%m-%d", "2024-01-01x"),
        ("%Y-%m-%d", "2024/01/01"),
        ("%Y-%m-%d", "24-01-01"),
        ("%Y-%m-%d", ""),
        ("%d.%m.%Y %H:%M", "01.10.2013 24:00"),
        ("%d.%m.%Y", "00.10.2013"),
    ] {
        let e = day(fmt, bad).unwrap_err();
        assert_eq!(e.line, 1, "{bad}");
    }
}

#[test]
fn debit_and_credit_columns() {
    let m = Mapping { date: idx(0), debit: idx(1), credit: idx(2), ..Mapping::default() };
    let csv = b"Date,Out,In\n2024-01-01,12.00,\n2024-01-02,,5.5\n2024-01-03,-3,0\n2024-01-04,1,2\n";
    assert_eq!(amounts(&read(csv, &m).unwrap()), [-1200, 550, -300, 100]);
    let e = err(b"Date,Out,In\n2024-01-01,,\n", &m);
    assert_eq!(e.line, 2);
    assert!(e.msg.contains("empty"), "{e}");
}

#[test]
fn amount_with_a_debit_credit_indicator() {
    let m = Mapping {
        date: idx(0),
        amount: idx(1),
        indicator: idx(2),
        debit_mark: Some("D".into()),
        ..Mapping::default()
    };
    let csv = b"Date,Sum,DK\n2024-01-01,14.34,D\n2024-01-02,1600.00,K\n2024-01-03,1,d\n";
    assert_eq!(amounts(&read(csv, &m).unwrap()), [-1434, 160_000, -100]);
    let strict = Mapping { credit_mark: Some("K".into()), ..m };
    let e = err(b"Date,Sum,DK\n2024-01-01,1,D\n2024-01-02,1,X\n", &strict);
    assert_eq!(e.line, 3);
    assert!(e.msg.contains("neither the debit nor the credit mark"), "{e}");
}

#[test]
fn decimal_comma_and_thousands_separators() {
    let m = Mapping { delimiter: ';', decimal_mark: ',', thousands_separator: Some('.'), ..plain() };
    let csv = b"Date;Amount\n2024-01-01;9.999,99\n2024-01-02;-1.234.567,8\n2024-01-03;-,46\n";
    assert_eq!(amounts(&read(csv, &m).unwrap()), [999_999, -123_456_780, -46]);
    let m = Mapping { delimiter: ';', decimal_mark: ',', thousands_separator: Some('\u{a0}'), ..plain() };
    assert_eq!(amounts(&read("Date;Amount\n2024-01-01;1\u{a0}234,5\n".as_bytes(), &m).unwrap()), [123_450]);
    let m = Mapping { thousands_separator: Some('\''), ..plain() };
    assert_eq!(amounts(&read(b"Date,Amount\n2024-01-01,1'234.05\n", &m).unwrap()), [123_405]);
    // A separator among the decimals is not a grouping.
    let m = Mapping { delimiter: ';', decimal_mark: ',', thousands_separator: Some('.'), ..plain() };
    assert_eq!(err(b"Date;Amount\n2024-01-01;1,2.3\n", &m).line, 2);
}

#[test]
fn accounts_and_currencies_by_column_or_fixed() {
    let m = Mapping { account: name("Acc"), currency: name("Cur"), ..plain() };
    let csv = b"Date,Acc,Cur,Amount\n2024-01-01,A,EUR,1\n2024-01-01,B,EUR,2\n2024-01-02,A,USD,3\n2024-01-03,A,EUR,4\n";
    let st = read(csv, &m).unwrap();
    let got: Vec<_> = st
        .iter()
        .map(|s| {
            (s.account.as_deref(), s.currency.as_deref(), s.lines.iter().map(|l| l.amount_cents).sum::<i64>())
        })
        .collect();
    assert_eq!(
        got,
        [(Some("A"), Some("EUR"), 500), (Some("B"), Some("EUR"), 200), (Some("A"), Some("USD"), 300)]
    );
    let m = Mapping { fixed_account: Some("DE12".into()), fixed_currency: Some("EUR".into()), ..plain() };
    let st = read(b"Date,Amount\n2024-01-01,1\n", &m).unwrap();
    assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (Some("DE12"), Some("EUR")));
}

#[test]
fn row_filter_keeps_only_matching_rows() {
    let m = Mapping { filter: Some(Filter { column: idx(1).unwrap(), equals: "20".into() }), ..plain() };
    let csv = b"Date,Type,Amount\n2024-01-01,10,999\n2024-01-02, 20 ,5\n2024-01-31,86,x\nTotal\n";
    let st = read(csv, &m).unwrap();
    assert_eq!((amounts(&st), lines(&st)[0].source_line), (vec![500], 3));
}

#[test]
fn charsets_and_bom() {
    let m = Mapping { charset: "cp1252".into(), payee: name("Payee"), ..plain() };
    let st = read(b"Date,Payee,Amount\n2024-01-01,Caf\xe9 \x80,1\n", &m).unwrap();
    assert_eq!(lines(&st)[0].payee.as_deref(), Some("Café €"));
    let m = Mapping { delimiter: ';', header_first_cell: Some("Date".into()), ..plain() };
    let st = read(b"\xef\xbb\xbf;\nDate;Amount\n2024-01-01;1\n", &m).unwrap();
    assert_eq!(lines(&st)[0].source_line, 3);
}

#[test]
fn crlf_blank_lines_and_quoted_newlines_keep_file_lines() {
    let csv = b"Date,Memo,Amount\r\n2024-01-01,\"two\r\nlines\",1\r\n\r\n\r\n2024-01-02,x,2\r\n2024-01-03,\"a \"\"q\"\"\",3\r\n";
    let st = read(csv, &Mapping { memo: name("Memo"), ..plain() }).unwrap();
    let got: Vec<_> = lines(&st).iter().map(|l| (l.source_line, l.memo.clone().unwrap())).collect();
    assert_eq!(got, [(2, "two\r\nlines".into()), (6, "x".into()), (7, "a \"q\"".into())]);
    let e = err(b"Date,Amount\r\n2024-01-01,1\r\n\r\n2024-13-01,2\r\n", &plain());
    assert_eq!(e.line, 4);
}

#[test]
fn unescaped_inner_quotes_are_read_not_refused() {
    let m = Mapping { payee: name("Payee"), ..plain() };
    let st = read(b"Date,Payee,Amount\n2024-01-01,\"UAB \"Naktida\"\",1\n", &m).unwrap();
    assert_eq!(amounts(&st), [100]);
    assert!(lines(&st)[0].payee.as_deref().unwrap().contains("Naktida"));
}

#[test]
fn a_file_without_a_header() {
    let m = Mapping { has_header: false, skip_lines: 1, date: idx(0), amount: idx(1), ..Mapping::default() };
    let st = read(b"export 2024\n2024-01-01,1,extra,fields\n2024-01-02,2\n", &m).unwrap();
    assert_eq!((amounts(&st), lines(&st)[0].source_line), (vec![100, 200], 2));
}

#[test]
fn check_refuses_mappings_that_cannot_work() {
    let refused = |m: Mapping, why: &str| {
        let e = m.check().expect_err(why);
        assert!(e.contains(why), "{e} / {why}");
        assert_eq!(err(b"Date,Amount\n2024-01-01,1\n", &m).line, 0);
    };
    assert_eq!(plain().check(), Ok(()));
    refused(Mapping { date: None, ..plain() }, "no date column");
    refused(Mapping { date_format: "%d.%b.%Y".into(), ..plain() }, "unknown directive `%b`");
    refused(Mapping { date_format: "%d.%m.%Y %".into(), ..plain() }, "lone `%`");
    refused(Mapping { date_format: "%d.%m".into(), ..plain() }, "needs one %d");
    refused(Mapping { date_format: "%d.%m.%Y %H %H".into(), ..plain() }, "repeats");
    refused(Mapping { debit: idx(1), credit: idx(2), ..plain() }, "both an amount column and debit/credit");
    refused(Mapping { amount: None, ..plain() }, "no amount column");
    refused(Mapping { amount: None, debit: idx(1), ..plain() }, "needs a credit column");
    refused(Mapping { indicator: idx(3), ..plain() }, "go together");
    refused(Mapping { debit_mark: Some("D".into()), ..plain() }, "go together");
    let dc = Mapping { amount: None, debit: idx(1), credit: idx(2), ..plain() };
    refused(Mapping { indicator: idx(3), debit_mark: Some("D".into()), ..dc }, "needs one amount column");
    refused(Mapping { credit_mark: Some("K".into()), ..plain() }, "credit mark needs");
    refused(Mapping { decimal_mark: ';', ..plain() }, "decimal mark");
    refused(Mapping { thousands_separator: Some('.'), decimal_mark: '.', ..plain() }, "thousands separator");
    refused(Mapping { delimiter: '"', ..plain() }, "delimiter");
    refused(Mapping { delimiter: '§', ..plain() }, "delimiter");
    refused(Mapping { currency: idx(2), fixed_currency: Some("EUR".into()), ..plain() }, "fixed currency");
    refused(Mapping { account: idx(2), fixed_account: Some("A".into()), ..plain() }, "fixed account");
    refused(Mapping { header_first_cell: Some(" ".into()), ..plain() }, "empty text");
    refused(Mapping { has_header: false, ..plain() }, "by index");
}

#[test]
fn mapping_json_round_trip_and_defaults() {
    // Every field away from its default.
    let m = Mapping {
        charset: "cp1257".into(),
        delimiter: '\t',
        skip_lines: 2,
        header_first_cell: Some("Sąskaitos Nr.".into()),
        has_header: true,
        date: name("Data"),
        date_format: "%d.%m.%y %H:%M:%S".into(),
        amount: idx(-3),
        debit: idx(4),
        credit: idx(5),
        indicator: idx(7),
        debit_mark: Some("D".into()),
        credit_mark: Some("K".into()),
        decimal_mark: ',',
        thousands_separator: Some('.'),
        payee: name("Gavėjas"),
        memo: idx(9),
        id: idx(8),
        currency: idx(6),
        account: idx(0),
        fixed_currency: Some("LTL".into()),
        fixed_account: Some("LT79".into()),
        filter: Some(Filter { column: Column::Index(1), equals: "20".into() }),
    };
    let json = serde_json::to_string(&m).unwrap();
    assert_eq!(serde_json::from_str::<Mapping>(&json).unwrap(), m);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(serde_json::from_value::<Mapping>(value).unwrap(), m);
    let short: Mapping =
        serde_json::from_str(r#"{"date": {"name": "Datum"}, "amount": {"index": -2}, "delimiter": ";"}"#)
            .unwrap();
    assert_eq!(short, Mapping { date: name("Datum"), amount: idx(-2), delimiter: ';', ..Mapping::default() });
    assert_eq!(
        (short.charset.as_str(), short.date_format.as_str(), short.has_header),
        ("UTF-8", "%Y-%m-%d", true)
    );
    assert!(serde_json::from_str::<Mapping>(r#"{"dat": {"name": "Datum"}}"#).is_err());
}

#[test]
fn binary_garbage_is_an_error_not_a_panic() {
    let e = err(b"\x00\x01\x02\xff\xfe\x00\n\x89PNG\r\n\x1a\n", &plain());
    assert_eq!(e.line, 1);
    let m = Mapping { header_first_cell: Some("Date".into()), ..plain() };
    let e = err(b"\x00\x01\x02\xff\xfe\x00\n\x89PNG\r\n\x1a\n", &m);
    assert_eq!(e.line, 0);
    assert!(e.msg.contains("no row starts with the header cell `Date`"), "{e}");
    // Pseudo-random bytes after a good header, through every amount layout: never a panic.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let layouts = [
        Mapping { amount: idx(-1), ..plain() },
        Mapping { amount: None, debit: name("Amount"), credit: name("Payee"), ..plain() },
        Mapping { indicator: idx(2), debit_mark: Some("D".into()), ..plain() },
    ];
    for round in 0..300 {
        let mut bytes = b"Date,Payee,Memo,Id,Amount\n".to_vec();
        for _ in 0..(round % 97) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(b",\n\"0123456789-.D"[(x % 16) as usize]);
        }
        let _ = read(&bytes, &layouts[round % 3]);
    }
}

#[test]
fn a_row_wider_than_its_header_is_refused() {
    let e = err(b"Date,Amount\n2024-01-01,1\n2024-01-02,2,oops\n", &plain());
    assert_eq!(e.line, 3);
    assert!(e.msg.contains("3 fields, more than the header's 2"), "{e}");
}

#[test]
fn a_missing_column_names_the_line() {
    let m = plain();
    let e =
        err(b"Date,Payee,Amount\n2024-01-01,x,1\n2024-01-02,y\n", &Mapping { amount: idx(2), ..m.clone() });
    assert_eq!(e.line, 3);
    assert!(e.msg.contains("no amount column (2 fields)"), "{e}");
    let e = err(b"Date,Payee\n", &m);
    assert_eq!(e.line, 1);
    assert!(e.msg.contains("no column `Amount` (amount)"), "{e}");
    let e = err(b"Date,Amount,Amount\n", &m);
    assert!(e.msg.contains("two columns `Amount`"), "{e}");
    let e = err(b"Date,Amount\n2024-01-01,\n", &m);
    assert_eq!((e.line, e.msg.as_str()), (2, "the amount is empty"));
}

#[test]
fn unparsable_dates_name_the_line() {
    let m = Mapping { date_format: "%Y%m%d".into(), ..plain() };
    let e = err(b"Date,Amount\n20240101,1\n20251345,2\n", &m);
    assert_eq!(e.line, 3);
    assert!(e.msg.contains("`20251345` is not a date"), "{e}");
}

#[test]
fn huge_amounts_are_refused_and_negative_zero_is_zero() {
    let big = format!("Date,Amount\n2024-01-01,{}\n", "9".repeat(40));
    let e = err(big.as_bytes(), &plain());
    assert_eq!(e.line, 2);
    assert!(e.msg.contains("too large"), "{e}");
    let st = read(b"Date,Amount\n2024-01-01,-0\n2024-01-02,-0.00\n", &plain()).unwrap();
    assert_eq!(amounts(&st), [0, 0]);
    let m = Mapping { indicator: idx(2), debit_mark: Some("D".into()), ..plain() };
    assert_eq!(amounts(&read(b"Date,Amount,DC\n2024-01-01,0.00,D\n", &m).unwrap()), [0]);
}

#[test]
fn more_than_max_lines_stops_at_the_first_line_too_many() {
    let mut csv = String::from("Date,Amount\n");
    for _ in 0..=MAX_LINES {
        csv.push_str("2024-01-01,1\n");
    }
    // Never read: the reader stops before it.
    csv.push_str("garbage,garbage\n");
    let e = err(csv.as_bytes(), &plain());
    assert_eq!(e.line, MAX_LINES + 2);
    assert!(e.msg.contains("more than"), "{e}");
}

#[test]
fn a_file_larger_than_the_limit_is_refused() {
    let big = vec![b'a'; crate::import::MAX_FILE_BYTES + 1];
    assert_eq!(err(&big, &plain()).line, 0);
}
