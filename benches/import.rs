//! Reading a 20,000-line statement (the most one import takes) against reading its file once.
//!
//! Writes a 20,000-line OFX and CAMT.053 file to a temporary directory, then times, over 11 runs
//! each: `std::fs::read` of the file, and `import::read` of its bytes (charset, parse, every
//! amount and date checked). Prints the medians and their ratio. Previewing adds the per-line
//! plan and the answer's JSON; `scripts/bench/import_bench.sh` times that over HTTP.
//!
//! Run: `cargo bench --bench import`

use std::time::Instant;

use pfm::import::{self, Format};

const LINES: usize = 20_000;

fn ofx() -> String {
    let mut s = String::from(
        "OFXHEADER:100\nDATA:OFXSGML\nVERSION:102\nCHARSET:1252\n\n<OFX><BANKMSGSRSV1><STMTTRNRS><STMTRS><CURDEF>EUR\n\
         <BANKACCTFROM><BANKID>1<ACCTID>BENCH</BANKACCTFROM><BANKTRANLIST>\n",
    );
    for i in 0..LINES {
        s.push_str(&format!(
            "<STMTTRN><TRNTYPE>DEBIT<DTPOSTED>2025{:02}{:02}<TRNAMT>-{}.{:02}<FITID>F{i}<NAME>Shop {}<MEMO>card payment</STMTTRN>\n",
            1 + (i / 28) % 12,
            1 + i % 28,
            i % 300,
            i % 100,
            i % 40
        ));
    }
    s.push_str("</BANKTRANLIST></STMTRS></STMTTRNRS></BANKMSGSRSV1></OFX>\n");
    s
}

fn camt() -> String {
    let mut s = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.053.001.02\">\
         <BkToCstmrStmt><GrpHdr><MsgId>B</MsgId><CreDtTm>2025-01-01T00:00:00</CreDtTm></GrpHdr>\
         <Stmt><Id>1</Id><CreDtTm>2025-01-01T00:00:00</CreDtTm><Acct><Id><IBAN>NL00BANK0123456789</IBAN></Id><Ccy>EUR</Ccy></Acct>\n",
    );
    for i in 0..LINES {
        s.push_str(&format!(
            "<Ntry><NtryRef>R{i}</NtryRef><Amt Ccy=\"EUR\">{}.{:02}</Amt><CdtDbtInd>{}</CdtDbtInd><Sts>BOOK</Sts>\
             <BookgDt><Dt>2025-{:02}-{:02}</Dt></BookgDt><ValDt><Dt>2025-01-01</Dt></ValDt><BkTxCd/>\
             <NtryDtls><TxDtls><RltdPties><Cdtr><Nm>Shop {}</Nm></Cdtr></RltdPties><RmtInf><Ustrd>card payment</Ustrd></RmtInf></TxDtls></NtryDtls></Ntry>\n",
            i % 300,
            i % 100,
            if i % 3 == 0 { "CRDT" } else { "DBIT" },
            1 + (i / 28) % 12,
            1 + i % 28,
            i % 40
        ));
    }
    s.push_str("</Stmt></BkToCstmrStmt></Document>\n");
    s
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    println!("{:<8} {:>10} {:>12} {:>12} {:>8}", "format", "bytes", "read (ms)", "parse (ms)", "ratio");
    for (name, format, text) in [("ofx", Format::Ofx, ofx()), ("camt053", Format::Camt053, camt())] {
        let path = dir.path().join(name);
        std::fs::write(&path, &text).expect("write");
        let mut reads = Vec::new();
        let mut parses = Vec::new();
        for _ in 0..11 {
            let t = Instant::now();
            let bytes = std::fs::read(&path).expect("read");
            reads.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let st = import::read(&bytes, format, None).expect("parse");
            parses.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(st.iter().map(|s| s.lines.len()).sum::<usize>(), LINES);
        }
        let (r, p) = (median(reads), median(parses));
        println!("{name:<8} {:>10} {r:>12.3} {p:>12.3} {:>8.1}", text.len(), p / r);
    }
}
