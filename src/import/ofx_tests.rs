//! Tests of the OFX reader.

use super::*;
use crate::domain::dates::days_from_civil;
use crate::import::corpus;

const SGML_HEADER: &str = "OFXHEADER:100\nDATA:OFXSGML\nVERSION:102\nSECURITY:NONE\nENCODING:USASCII\n\
                           CHARSET:1252\nCOMPRESSION:NONE\nOLDFILEUID:NONE\nNEWFILEUID:NONE\n\n";

/// An OFX 1.x bank statement around `transactions`, SGML without end tags on data elements.
fn sgml(transactions: &str) -> String {
    format!(
        "{SGML_HEADER}<OFX>\n<BANKMSGSRSV1>\n<STMTTRNRS>\n<TRNUID>1\n<STMTRS>\n<CURDEF>USD\n\
         <BANKACCTFROM>\n<BANKID>121099999\n<ACCTID>999988\n<ACCTTYPE>CHECKING\n</BANKACCTFROM>\n\
         <BANKTRANLIST>\n<DTSTART>20051001\n<DTEND>20051028\n{transactions}</BANKTRANLIST>\n\
         </STMTRS>\n</STMTTRNRS>\n</BANKMSGSRSV1>\n</OFX>\n"
    )
}

fn read_str(s: &str) -> Result<Vec<Statement>, ImportError> {
    read(s.as_bytes())
}

fn one_line(s: &str) -> Line {
    let st = read_str(s).unwrap();
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].lines.len(), 1);
    st[0].lines[0].clone()
}

fn err(s: &[u8]) -> ImportError {
    read(s).expect_err("the file must be refused")
}

/// The line of the first occurrence of `needle`.
fn line_of(s: &str, needle: &str) -> usize {
    s[..s.find(needle).expect(needle)].matches('\n').count() + 1
}

#[test]
fn every_ofx_and_qfx_file_of_the_corpus() {
    let entries: Vec<_> = corpus::entries("ofx").into_iter().chain(corpus::entries("qfx")).collect();
    assert_eq!(entries.len(), 9);
    for e in &entries {
        let got = read(&corpus::bytes(e)).unwrap_or_else(|err| panic!("{}: {err}", e["file"]));
        corpus::check(e, &got);
    }
}

/// The payees of the corpus in the charsets their headers declare (or not).
#[test]
fn corpus_payees_are_decoded() {
    let first = |file: &str| {
        let e = corpus::entries("").into_iter().find(|e| e["file"] == file).expect(file);
        read(&corpus::bytes(&e)).unwrap()[0].lines[0].clone()
    };
    let l = first("qfx_actual_1252.qfx");
    assert_eq!(
        (l.payee.as_deref(), l.memo.as_deref()),
        (Some("Café Métro €uro"), Some("Paiement 5€ — débit"))
    );
    assert_eq!(first("qfx_actual_8859-1.qfx").payee.as_deref(), Some("Paiement facture/Carte prépayée"));
    assert_eq!(first("qfx_chase_cc.qfx").payee.as_deref(), Some("SQ *ECCO UN POCO \u{a6} NATURA"));
    let l = first("ofx2_suncorp_cdata.ofx");
    assert_eq!(l.payee.as_deref(), Some("EFTPOS WDL HANDYWAY ALDI STORE"));
    assert_eq!(l.memo.as_deref(), Some("EFTPOS WDL HANDYWAY ALDI STORE   GEELONG WEST VICAU"));
}

/// The OFX 1.x spec's form: header lines, unclosed data elements, end tags on aggregates.
#[test]
fn sgml_statement_with_unclosed_tags() {
    let f = sgml(
        "<STMTTRN>\n<TRNTYPE>CHECK\n<DTPOSTED>20051004120000[-5:EST]\n<TRNAMT>-200.00\n\
         <FITID>00002\n<CHECKNUM>1000\n<NAME>Check 1000\n<MEMO>rent\n</STMTTRN>\n",
    );
    let st = read_str(&f).unwrap();
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].account.as_deref(), Some("999988"));
    assert_eq!(st[0].currency.as_deref(), Some("USD"));
    assert_eq!(
        st[0].lines,
        vec![Line {
            day: days_from_civil(2005, 10, 4),
            amount_cents: -20_000,
            payee: Some("Check 1000".into()),
            memo: Some("rent".into()),
            bank_id: Some("00002".into()),
            source_line: line_of(&f, "<STMTTRN>"),
        }]
    );
}

/// Blank lines before the header, the body on one line with end tags, empty elements.
#[test]
fn one_line_body_with_end_tags_and_empty_elements() {
    let f = format!(
        "\n\n\n{SGML_HEADER}<OFX><BANKMSGSRSV1><STMTTRNRS><STMTRS><CURDEF></CURDEF><BANKACCTFROM>\
         <BANKID>NPBS</BANKID><ACCTID>12345678</ACCTID><ACCTTYPE></ACCTTYPE></BANKACCTFROM>\
         <BANKTRANLIST><STMTTRN><TRNTYPE>Credit</TRNTYPE><DTPOSTED>20180507</DTPOSTED>\
         <TRNAMT>12.34</TRNAMT><FITID></FITID><NAME></NAME><MEMO>CBA:Transfer</MEMO><CURRENCY>\
         <CURRATE>1.0000</CURRATE><CURSYM>AUD</CURSYM></CURRENCY></STMTTRN></BANKTRANLIST>\
         </STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>"
    );
    let st = read_str(&f).unwrap();
    assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (Some("12345678"), None));
    let l = &st[0].lines[0];
    assert_eq!((l.amount_cents, l.bank_id.as_deref(), l.payee.as_deref()), (1234, None, None));
    assert_eq!((l.memo.as_deref(), l.source_line), (Some("CBA:Transfer"), line_of(&f, "<OFX>")));
}

/// An empty data element without an end tag does not swallow the elements after it.
#[test]
fn empty_unclosed_element_is_an_empty_data_element() {
    let l = one_line(&sgml(
        "<STMTTRN>\n<CHECKNUM>\n<DTPOSTED>20051004\n<TRNAMT>1\n<FITID>\n<NAME>After\n</STMTTRN>\n",
    ));
    assert_eq!((l.amount_cents, l.bank_id, l.payee.as_deref()), (100, None, Some("After")));
}

#[test]
fn tag_names_are_read_in_any_case_and_values_kept_as_written() {
    let l = one_line(&sgml(
        "<stmttrn>\n<TrnType>Credit\n<dtposted>20051004\n<trnamt>+5\n<fitid>aBc\n<name>MiXeD\n</stmttrn>\n",
    ));
    assert_eq!((l.amount_cents, l.bank_id.as_deref(), l.payee.as_deref()), (500, Some("aBc"), Some("MiXeD")));
}

#[test]
fn payee_aggregate_name_when_there_is_no_name() {
    let l = one_line(&sgml(
        "<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>-1.5\n<PAYEE>\n<NAME>Power Co\n<ADDR1>1 Main St\n\
         <CITY>X\n</PAYEE>\n<MEMO>bill\n</STMTTRN>\n",
    ));
    assert_eq!(
        (l.amount_cents, l.payee.as_deref(), l.memo.as_deref()),
        (-150, Some("Power Co"), Some("bill"))
    );
}

#[test]
fn charsets_from_the_header() {
    let file = |charset: &str, name: &[u8]| -> Vec<u8> {
        let f = sgml("<STMTTRN>\n<DTPOSTED>20221019\n<TRNAMT>-20.00\n<NAME>@@\n</STMTTRN>\n");
        let f = f.replace("CHARSET:1252", charset);
        let (a, b) = f.split_once("@@").unwrap();
        [a.as_bytes(), name, b.as_bytes()].concat()
    };
    let payee = |f: Vec<u8>| read(&f).unwrap()[0].lines[0].payee.clone().unwrap();
    assert_eq!(payee(file("CHARSET:1252", b"Caf\xe9 \x80uro \x97 x")), "Café €uro — x");
    assert_eq!(payee(file("CHARSET:8859-1", b"pr\xe9pay\xe9e")), "prépayée");
    // UTF-8 bytes under a 1252 header (Chase) are UTF-8.
    assert_eq!(payee(file("CHARSET:1252", "SQ *ECCO \u{a6} NATURA".as_bytes())), "SQ *ECCO \u{a6} NATURA");
    assert_eq!(declared_charset(b"\n\nOFXHEADER:100\r\nCHARSET:8859-1\r\n<OFX>").as_deref(), Some("8859-1"));
    assert_eq!(declared_charset(b"OFXHEADER:100\nENCODING:UTF-8\nCHARSET:NONE\n").as_deref(), Some("utf-8"));
    assert_eq!(
        declared_charset(b"<?xml version='1.0' encoding='us-ascii'?><OFX>").as_deref(),
        Some("us-ascii")
    );
}

const XML_HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\r\n\
                        <?OFX OFXHEADER=\"200\" VERSION=\"200\" SECURITY=\"NONE\" OLDFILEUID=\"NONE\" \
                        NEWFILEUID=\"NONE\"?>  \r\n";

/// OFX 2.x: processing instructions, CDATA, entities, a comma as the decimal mark.
#[test]
fn xml_statement_with_cdata_entities_and_decimal_comma() {
    let f = format!(
        "{XML_HEAD}<OFX>\r\n<!-- a comment <STMTTRN> -->\r\n<BANKMSGSRSV1><STMTTRNRS><STMTRS>\r\n\
         <CURDEF>AUD</CURDEF><BANKACCTFROM><BANKID>S</BANKID><ACCTID>123456789</ACCTID>\
         </BANKACCTFROM>\r\n<BANKTRANLIST>\r\n<STMTTRN>\r\n<DTPOSTED>20131215</DTPOSTED>\r\n\
         <TRNAMT>-200,00</TRNAMT>\r\n<FITID>1</FITID>\r\n\
         <NAME><![CDATA[EFTPOS <ALDI> & CO  ]]></NAME>\r\n\
         <MEMO>AT&amp;T &lt;x&gt; &quot;q&quot; &apos;a&apos; &#233;&#xE9; AT&T &bogus; &#0;</MEMO>\r\n\
         </STMTTRN>\r\n<STMTTRN><DTPOSTED>20131216</DTPOSTED><TRNAMT>1,5</TRNAMT><FITID/></STMTTRN>\r\n\
         </BANKTRANLIST></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>"
    );
    let st = read_str(&f).unwrap();
    let l = &st[0].lines;
    assert_eq!((st[0].account.as_deref(), st[0].currency.as_deref()), (Some("123456789"), Some("AUD")));
    assert_eq!((l[0].amount_cents, l[1].amount_cents, l[1].bank_id.as_deref()), (-20_000, 150, None));
    assert_eq!(l[0].payee.as_deref(), Some("EFTPOS <ALDI> & CO"));
    assert_eq!(l[0].memo.as_deref(), Some("AT&T <x> \"q\" 'a' éé AT&T &bogus; &#0;"));
    let want = (line_of(&f, "<STMTTRN>\r\n"), line_of(&f, "<STMTTRN><DTPOSTED>20131216"));
    assert_eq!((l[0].source_line, l[1].source_line), want);
}

/// ANZ: an OFX 2 XML header followed by SGML tags.
#[test]
fn xml_header_with_sgml_body() {
    let f = format!(
        "{XML_HEAD}<OFX>\n<CREDITCARDMSGSRSV1>\n<CCSTMTTRNRS>\n<CCSTMTRS>\n<CURDEF>AUD\n<CCACCTFROM>\n\
         <ACCTID>1234123412341234\n</CCACCTFROM>\n<BANKTRANLIST>\n<STMTTRN>\n<TRNTYPE>DEBIT\n\
         <DTPOSTED>20170508000000\n<TRNAMT>-5.50\n<FITID>201705080001\n<MEMO>SOME MEMO\n</STMTTRN>\n\
         </BANKTRANLIST>\n<LEDGERBAL>\n<BALAMT>-123.45\n</LEDGERBAL>\n</CCSTMTRS>\n</CCSTMTTRNRS>\n\
         </CREDITCARDMSGSRSV1>\n</OFX>\n"
    );
    let st = read_str(&f).unwrap();
    assert_eq!(st[0].account.as_deref(), Some("1234123412341234"));
    assert_eq!((st[0].lines[0].amount_cents, st[0].lines[0].day), (-550, days_from_civil(2017, 5, 8)));
}

/// Two accounts, bank and card; the bank account's second statement is merged into its first.
#[test]
fn several_accounts_and_merged_statements() {
    let bank = |acct: &str, fitid: &str| {
        format!(
            "<STMTTRNRS><STMTRS><CURDEF>EUR<BANKACCTFROM><ACCTID>{acct}</BANKACCTFROM><BANKTRANLIST>\
             <STMTTRN><DTPOSTED>20240101<TRNAMT>1.00<FITID>{fitid}\n</STMTTRN></BANKTRANLIST>\
             </STMTRS></STMTTRNRS>\n"
        )
    };
    let f = format!(
        "{SGML_HEADER}<OFX><BANKMSGSRSV1>\n{}{}</BANKMSGSRSV1><CREDITCARDMSGSRSV1><CCSTMTTRNRS>\
         <CCSTMTRS><CURDEF>EUR<CCACCTFROM><ACCTID>card</CCACCTFROM><BANKTRANLIST><STMTTRN>\
         <DTPOSTED>20240102<TRNAMT>-3<FITID>c1</STMTTRN></BANKTRANLIST></CCSTMTRS></CCSTMTTRNRS>\
         </CREDITCARDMSGSRSV1><BANKMSGSRSV1>{}</BANKMSGSRSV1></OFX>",
        bank("A", "a1"),
        bank("B", "b1"),
        bank("A", "a2"),
    );
    let st = read_str(&f).unwrap();
    let got: Vec<_> = st
        .iter()
        .map(|s| {
            let ids: Vec<_> = s.lines.iter().map(|l| l.bank_id.clone().unwrap()).collect();
            (s.account.clone().unwrap(), ids)
        })
        .collect();
    let want = |a: &str, ids: &[&str]| (a.to_string(), ids.iter().map(|i| i.to_string()).collect::<Vec<_>>());
    assert_eq!(got, vec![want("A", &["a1", "a2"]), want("B", &["b1"]), want("card", &["c1"])]);
}

/// A transfer's destination account and a balance's name are not the statement's.
#[test]
fn account_and_names_of_other_aggregates_are_not_taken() {
    let st = read_str(&sgml(
        "<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>-1\n<BANKACCTTO>\n<BANKID>1\n<ACCTID>other\n\
         </BANKACCTTO>\n</STMTTRN>\n<BALLIST><BAL><NAME>Interest<VALUE>1</BAL></BALLIST>\n",
    ))
    .unwrap();
    assert_eq!((st[0].account.as_deref(), st[0].lines[0].payee.as_deref()), (Some("999988"), None));
}

#[test]
fn line_numbers_count_crlf_and_lone_cr() {
    let f = sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n</STMTTRN>\n");
    let want = line_of(&f, "<STMTTRN>");
    assert_eq!(one_line(&f.replace('\n', "\r\n")).source_line, want);
    assert_eq!(one_line(&f.replace('\n', "\r")).source_line, want);
}

// ---------------------------------------------------------------------------- hostile

#[test]
fn binary_garbage_is_refused_with_a_line() {
    let e = err(b"OFXHEADER:100\n\n<OFX>\n\x00\x01\x02\xff\xfe");
    assert_eq!(e.line, 4, "{e}");
    let mut noise = Vec::new();
    let mut x: u32 = 0x1234_5678;
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise.push((x % 255 + 1) as u8);
    }
    assert!(err(&noise).line >= 1);
    assert_eq!(err(b"just some text").line, 1);
}

#[test]
fn transaction_without_amount_or_date_names_its_line() {
    for (drop, tag) in [("<TRNAMT>1\n", "TRNAMT"), ("<DTPOSTED>20051004\n", "DTPOSTED")] {
        let f = sgml(&"<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n</STMTTRN>\n".replace(drop, ""));
        let e = read_str(&f).unwrap_err();
        assert_eq!(e.line, line_of(&f, "<STMTTRN>"), "{e}");
        assert!(e.msg.contains(tag), "{e}");
    }
}

/// Every cut of a file before its statement ends is refused, and none panics.
#[test]
fn truncated_files_are_refused() {
    let f = sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<NAME>A &amp; B\n</STMTTRN>\n");
    let end = f.find("</STMTRS>").unwrap() + "</STMTRS>".len();
    for cut in 0..end {
        let e = read(&f.as_bytes()[..cut]).unwrap_err();
        assert!(e.line >= 1 || cut == 0, "cut at {cut}: {e}");
    }
    let e = read_str(&f[..f.find("</STMTTRN>").unwrap()]).unwrap_err();
    assert!(e.msg.contains("truncated"), "{e}");
    assert!(read_str(&f[..end]).is_ok());
}

#[test]
fn impossible_dates_and_huge_amounts_name_their_line() {
    let f = sgml("<STMTTRN>\n<DTPOSTED>20251345\n<TRNAMT>1\n</STMTTRN>\n");
    assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<DTPOSTED>"));
    let f =
        sgml("<STMTTRN>\n<DTPOSTED>20251231\n<TRNAMT>1234567890123456789012345678901234567890\n</STMTTRN>\n");
    assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<TRNAMT>"));
    let f = sgml("<STMTTRN>\n<DTPOSTED>20251231\n<TRNAMT>1\n<TRNAMT>2\n</STMTTRN>\n");
    assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<TRNAMT>2"));
}

#[test]
fn deep_nesting_is_capped() {
    let depth = 100_000;
    let f = format!("{SGML_HEADER}<OFX>\n{}{}</OFX>", "<A>\n".repeat(depth), "</A>".repeat(depth));
    let e = read_str(&f).unwrap_err();
    // <OFX> is the first open aggregate, so the A that goes past the cap is the 64th.
    assert_eq!(e.line, line_of(&f, "<OFX>") + MAX_DEPTH, "{e}");
    // Unclosed tags are empty data elements, not nesting.
    let f = sgml(&format!("{}<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n</STMTTRN>\n", "<B>".repeat(depth)));
    assert_eq!(read_str(&f).unwrap()[0].lines.len(), 1);
    let f = sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<STMTTRN>\n");
    assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<TRNAMT>1\n<STMTTRN>") + 1);
}

#[test]
fn more_than_max_lines_transactions_stops_early() {
    let tx = "<STMTTRN><DTPOSTED>20240101<TRNAMT>1</STMTTRN>\n";
    let f = sgml(&tx.repeat(MAX_LINES + 1000));
    let e = read_str(&f).unwrap_err();
    assert_eq!(e.line, line_of(&f, "<STMTTRN>") + MAX_LINES, "{e}");
    assert_eq!(read_str(&sgml(&tx.repeat(MAX_LINES))).unwrap()[0].lines.len(), MAX_LINES);
}

#[test]
fn unclosed_markup_and_odd_tags_name_their_line() {
    for (body, needle) in [
        ("<!-- never closed\n", "<!--"),
        ("<NAME><![CDATA[never closed\n", "<NAME>"),
        ("<NAME>a <B c\n<MEMO>x\n", "<NAME>"),
        ("<?pi never closed\n", "<?pi"),
    ] {
        let f = sgml(&format!("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n{body}</STMTTRN>\n"));
        assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, needle), "{body}");
    }
    let doctype = "<!DOCTYPE OFX [<!ENTITY a \"aaaa\">]>";
    let f = sgml(&format!("\n{doctype}\n"));
    assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, doctype));
    let long = format!("<{}>", "N".repeat(MAX_NAME_BYTES + 1));
    let f = sgml(&format!("\n{long}x\n"));
    assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, &long));
    let many: String = (0..MAX_AGGREGATE_NAMES + 1).map(|i| format!("<A{i}><X>1</A{i}>\n")).collect();
    assert!(read_str(&sgml(&many)).is_err());
    // A `<` that opens no tag is text.
    let l = one_line(&sgml("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<NAME>1 < 2 <= 3\n</STMTTRN>\n"));
    assert_eq!(l.payee.as_deref(), Some("1 < 2 <= 3"));
}

/// Megabytes of `&`, stray `<` and entity starts cost linear time.
#[test]
fn pathological_values_cost_linear_time() {
    for junk in ["&", "< ", "&#", "&#x", "<"] {
        let value = junk.repeat(1 << 20);
        let f = sgml(&format!("<STMTTRN>\n<DTPOSTED>20051004\n<TRNAMT>1\n<MEMO>{value}\n</STMTTRN>\n"));
        let l = one_line(&f);
        assert_eq!(l.memo.map(|m| m.len()), Some(value.trim().len()), "{junk}");
    }
}

#[test]
fn files_without_a_bank_statement() {
    let f = format!(
        "{SGML_HEADER}<OFX><SIGNONMSGSRSV1><SONRS><STATUS><CODE>15500<SEVERITY>ERROR\
                     <MESSAGE>bad password</STATUS></SONRS></SIGNONMSGSRSV1></OFX>"
    );
    assert!(read_str(&f).unwrap_err().msg.contains("15500: bad password"));
    let f = format!(
        "{SGML_HEADER}<OFX><INVSTMTMSGSRSV1><INVSTMTTRNRS>\n<INVSTMTRS><INVBANKTRAN>\
                     <STMTTRN><DTPOSTED>20240101<TRNAMT>1</STMTTRN></INVBANKTRAN></INVSTMTRS>\
                     </INVSTMTTRNRS></INVSTMTMSGSRSV1></OFX>"
    );
    assert_eq!(read_str(&f).unwrap_err().line, line_of(&f, "<INVSTMTRS>"));
    assert!(read_str(&format!("{SGML_HEADER}<OFX></OFX>")).is_err());
}

/// Structured noise made of OFX's own pieces: every outcome is a value or an error.
#[test]
fn random_pieces_never_panic() {
    const PIECES: [&str; 22] = [
        "<OFX>",
        "</OFX>",
        "<STMTRS>",
        "</STMTRS>",
        "<CCSTMTRS>",
        "<STMTTRN>",
        "</STMTTRN>",
        "<TRNAMT>",
        "-1,5",
        "1.25",
        "<DTPOSTED>",
        "20240229",
        "<FITID>",
        "</FITID>",
        "<![CDATA[x]]>",
        "&#x1F600;",
        "&#",
        "\n",
        "\r",
        "<A>",
        "</A>",
        "<ACCTID>é",
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..3_000 {
        let mut f = String::from("OFXHEADER:100\n");
        for _ in 0..(x % 60) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f.push_str(PIECES[(x % PIECES.len() as u64) as usize]);
        }
        if let Err(e) = read_str(&f) {
            assert!(e.line >= 1, "{f:?}: {e}");
        }
    }
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let mut f = b"OFXHEADER:100\n<OFX><STMTRS><STMTTRN>".to_vec();
        f.extend(bytes);
        let _ = read(&f);
    }
}
