"""JUnit XML for CI systems: one test case per verification check and per gate."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from rdmaprov.health.gates.result import GateResult
from rdmaprov.health.verify import HostVerification


def junit_xml(cluster: str, verifications: list[HostVerification], gates: list[GateResult]) -> str:
    suites = ET.Element("testsuites", name=f"rdmaprov {cluster}")
    verify = ET.SubElement(suites, "testsuite", name="verify")
    count = failures = skipped = 0
    for host in verifications:
        if host.error:
            case = ET.SubElement(verify, "testcase", classname=host.name, name="reachable")
            ET.SubElement(case, "failure", message=host.error)
            count, failures = count + 1, failures + 1
        for f in host.findings:
            case = ET.SubElement(verify, "testcase", classname=host.name, name=f"{f.subject}: {f.check}")
            count += 1
            if f.unknown:
                skipped += 1
                ET.SubElement(case, "skipped", message=f.found)
            elif not f.ok:
                failures += 1
                ET.SubElement(case, "failure", message=f"expected {f.expected}, found {f.found}").text = f.hint
    verify.set("tests", str(count))
    verify.set("failures", str(failures))
    verify.set("skipped", str(skipped))
    suite = ET.SubElement(
        suites, "testsuite", name="gates", tests=str(len(gates)), failures=str(sum(not g.passed for g in gates))
    )
    for gate in gates:
        case = ET.SubElement(suite, "testcase", classname=gate.gate, name=str(gate.subject))
        if not gate.passed:
            ET.SubElement(case, "failure", message=gate.reason)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)
