#!/usr/bin/env python3
"""Parses Kiln's responses with botocore's own JSON response parser.

Reads lines "<Operation> <json>" from the program given as argv[1] and, for
each, runs botocore's parser for that SageMaker operation, then checks what a
boto3 user would see: every required member present, timestamps turned into
datetimes, integers as ints, statuses from the model's enums.
"""
import datetime
import subprocess
import sys

import botocore.loaders
import botocore.model
from botocore.parsers import create_parser


def sagemaker_model():
    """botocore's SageMaker service model, as a boto3 client loads it."""
    loader = botocore.loaders.create_loader()
    return botocore.model.ServiceModel(
        loader.load_service_model("sagemaker", "service-2"), service_name="sagemaker")


def check_required(shape, value, path, problems):
    if shape.type_name == "structure":
        for name in shape.required_members:
            if name not in value:
                problems.append(f"{path}: required member {name} missing")
        for name, member in shape.members.items():
            if name in value:
                check_required(member, value[name], f"{path}.{name}", problems)
    elif shape.type_name == "list":
        for i, item in enumerate(value):
            check_required(shape.member, item, f"{path}[{i}]", problems)
    elif shape.type_name == "timestamp" and not isinstance(value, datetime.datetime):
        problems.append(f"{path}: not parsed as a timestamp: {value!r}")
    elif shape.type_name in ("integer", "long") and not isinstance(value, int):
        problems.append(f"{path}: not an integer: {value!r}")
    elif shape.type_name == "string" and getattr(shape, "enum", None) and value not in shape.enum:
        problems.append(f"{path}: {value!r} is not one of the model's values")


def main():
    out = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    model = sagemaker_model()
    parser = create_parser("json")
    problems, seen = [], 0
    for line in out.splitlines():
        operation, body = line.split(" ", 1)
        shape = model.operation_model(operation).output_shape
        parsed = parser.parse({"status_code": 200, "headers": {}, "body": body.encode()}, shape)
        if "Error" in parsed:
            problems.append(f"{operation}: botocore saw an error: {parsed['Error']}")
            continue
        check_required(shape, parsed, operation, problems)
        seen += 1
        if operation == "DescribeTrainingJob":
            transitions = parsed["SecondaryStatusTransitions"]
            if transitions[-1]["Status"] != parsed["SecondaryStatus"]:
                problems.append(f"{operation}: last transition is not the SecondaryStatus")
            if parsed.get("HyperParameters") != {"lr": "0.1"}:
                problems.append(f"{operation}: HyperParameters not echoed: {parsed.get('HyperParameters')}")
    if seen < 4:
        problems.append(f"expected 4 responses, parsed {seen}")
    for p in problems:
        print(p)
    print(f"wire check: {seen} responses parsed, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
