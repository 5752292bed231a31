#!/usr/bin/env python3
"""Checks Kiln's request corpus with botocore's own client-side validation.

Every tests/corpus/*.json must pass botocore's ParamValidator for
CreateTrainingJob, i.e. work unchanged as
boto3.client('sagemaker').create_training_job(**request). As a guard that the
check itself can fail, a request with a missing required member and one with a
wrong type must be rejected.

Usage: check_botocore.py FILE.json...
"""
import copy
import json
import sys

import botocore.loaders
import botocore.model
from botocore.validate import ParamValidator


def sagemaker_model():
    """botocore's SageMaker service model, as a boto3 client loads it."""
    loader = botocore.loaders.create_loader()
    return botocore.model.ServiceModel(
        loader.load_service_model("sagemaker", "service-2"), service_name="sagemaker")


def main(paths):
    model = sagemaker_model()
    shape = model.operation_model("CreateTrainingJob").input_shape
    validator = ParamValidator()
    failures = 0
    requests = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            request = json.load(f)
        requests.append(request)
        report = validator.validate(request, shape)
        if report.has_errors():
            failures += 1
            print(f"{path}: rejected by botocore:\n{report.generate_report()}")
        else:
            print(f"{path}: accepted by botocore")
    if not requests:
        print("no corpus files given")
        return 1
    broken = copy.deepcopy(requests[0])
    del broken["RoleArn"]
    if not validator.validate(broken, shape).has_errors():
        print("self-check: botocore accepted a request without RoleArn")
        failures += 1
    broken = copy.deepcopy(requests[0])
    broken["ResourceConfig"]["InstanceCount"] = "2"
    if not validator.validate(broken, shape).has_errors():
        print("self-check: botocore accepted a string InstanceCount")
        failures += 1
    print(f"botocore check: {len(paths)} files, {failures} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
